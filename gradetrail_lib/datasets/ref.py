"""Where a spec's samples come from: a file or a Hugging Face dataset at a commit."""

from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gradetrail_lib.datasets.registry import format_names

# The `format:` choices: the registered file formats (to the type checker, a string).
if TYPE_CHECKING:
    FormatName = str
else:
    FormatName = Literal[format_names()]


class DatasetRef(BaseModel):
    """A file (`path`, with an optional `format`) or a Hugging Face dataset (`hf`, with
    `split` and the `revision` commit, so a run reads the same rows again), one of them.
    Unset keys are left out of the spec hash, so a `{path: ...}` spec keeps its hash."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str | None = Field(
        default=None, description="JSONL, CSV or Parquet file, relative to the spec's folder."
    )
    format: FormatName | None = Field(
        default=None, description="The file's format; by default from its suffix, else JSONL."
    )
    hf: str | None = Field(default=None, min_length=1, description="Hugging Face repo id.")
    config: str | None = Field(default=None, min_length=1)
    split: str | None = Field(default=None, min_length=1)
    revision: str | None = Field(
        default=None, pattern=r"^[0-9a-f]{40}$", description="The dataset repo's commit sha."
    )

    @model_validator(mode="after")
    def _one_source(self) -> "DatasetRef":
        if (self.path is None) == (self.hf is None):
            raise ValueError("give path (a file) or hf (a Hugging Face dataset), one of them")
        if self.path is not None:
            extra = [k for k in ("config", "split", "revision") if getattr(self, k) is not None]
            if extra:
                raise ValueError(f"{', '.join(extra)}: only with hf")
        else:
            if self.format is not None:
                raise ValueError("format: only with path")
            missing = [k for k in ("split", "revision") if getattr(self, k) is None]
            if missing:
                raise ValueError(
                    f"hf needs {' and '.join(missing)} (revision: the commit sha, so a run "
                    "is reproducible)"
                )
        return self

    @property
    def label(self) -> str:
        """How the dataset is named in errors, manifests and descriptions."""
        if self.path is not None:
            return self.path
        return f"hf:{self.hf}:{self.config or 'default'}:{self.split}@{self.revision}"
