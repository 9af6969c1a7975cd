"""Environments whose observation is an image: ``uint8`` frames ``[height, width, channels]``.

Read with ``network.encoder=cnn`` (:class:`stoixlite.networks.cnn.CNNEncoder`), which scales the
pixels to [0, 1] on device; the observation augmentation (``env.obs_augment``) does not apply to
images, so their configs set it to false. See docs/envs.md, "Image observations".
"""
