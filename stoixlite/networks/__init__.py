"""Networks: memory models (``networks/memory``), MLP torso and heads, actor-critic assembly."""
