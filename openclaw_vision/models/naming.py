"""What a model's builds are called and how wide their embeddings are: the data-home stem of a model at an
`output_dim`, and that width.

The running node reads these (to find the files it loads) as much as the build tools that write them, so they live
beside the model configs, not with the builds. No NumPy at import: config reads them (the projection's check is
imported only where a width is asked for).
"""

from __future__ import annotations

from .configs import canonical_name


def output_width(model: str, output_dim: int) -> int:
    """The projection width of `model` at `output_dim`: 0 for none (0, or the tower's own width: the same model,
    the same files); models.projection.ProjectionError above the tower's width."""
    from .configs import get_config
    from .projection import check_output_dim

    return check_output_dim(output_dim, get_config(model).embed_dim, canonical_name(model)) if output_dim else 0


def projected_name(model: str, output_dim: int = 0) -> str:
    """The data-home stem of `model`'s builds at `output_dim`: `ViT-bigG-14-512` (`ViT-B-32` at 0 or 512)."""
    dim = output_width(model, output_dim)
    return f"{canonical_name(model)}-{dim}" if dim else model  # no projection: the name as every path had it
