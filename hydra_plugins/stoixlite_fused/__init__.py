"""stoixlite's ``fused`` Hydra launcher (``hydra/launcher=fused``), where Hydra finds launchers:
the class is :class:`stoixlite.cli.fused_launcher.FusedLauncher` (see there)."""

from stoixlite.cli.fused_launcher import FusedLauncher as _FusedLauncher


class FusedLauncher(_FusedLauncher):
    """:class:`stoixlite.cli.fused_launcher.FusedLauncher`, named in ``hydra_plugins`` (Hydra
    instantiates plugins from that package only)."""
