"""A spec's prompt: the first messages of each sample's conversation, rendered."""

from collections.abc import Iterable
from pathlib import Path

from gradetrail_lib.datasets.dataset import Sample
from gradetrail_lib.providers.base import Message
from gradetrail_lib.providers.media import MediaSource
from gradetrail_lib.spec.choices import ChoiceRenderer, FewShot, fewshot_prompt, lettered
from gradetrail_lib.spec.media import MediaResolver
from gradetrail_lib.spec.spec import Spec
from gradetrail_lib.templating import Template


class PromptRenderer:
    """The first messages of a sample's conversation: `system` and `prompt`, or the
    spec's `messages:` chat, each content a template. With `fewshot`, the prompt follows
    its examples (`spec.choices`); a multiple-choice spec answered by generation asks
    with lettered options (`choices`)."""

    def __init__(
        self,
        spec: Spec,
        fewshot: FewShot | None = None,
        choices: ChoiceRenderer | None = None,
        media_dir: Path | None = None,
    ) -> None:
        """`media_dir`: where a sample's media paths are relative to (the dataset's
        folder; the current one when unset)."""
        self._choices = choices
        self.media = MediaResolver(media_dir or Path.cwd())
        # The sample fields each message's media come from (by position in `_chat`).
        self._media_fields: dict[int, list[str]] = {}
        self._fewshot = None
        if fewshot is not None and spec.fewshot is not None and spec.fewshot.answer is not None:
            assert spec.prompt is not None
            answer = Template(spec.fewshot.answer, "fewshot.answer")
            self._fewshot = fewshot_prompt(fewshot, Template(spec.prompt, "prompt"), answer)
        self._chat: list[tuple[str, Template]] = []
        if spec.messages is not None:
            for i, m in enumerate(spec.messages):
                self._chat.append((m.role, Template(m.content, f"messages[{i}].content")))
                if m.media:
                    self._media_fields[i] = m.media
            return
        if spec.system is not None:
            self._chat.append(("system", Template(spec.system, "system")))
        assert spec.prompt is not None
        self._chat.append(("user", Template(spec.prompt, "prompt")))
        if spec.media:
            self._media_fields[len(self._chat) - 1] = spec.media

    @property
    def shared_messages(self) -> int:
        """How many of the first messages every sample shares (their templates read no
        field): the prefix a prompt cache can hold."""
        count = 0
        for i, (_, template) in enumerate(self._chat):
            if not template.constant or i in self._media_fields:
                break
            count += 1
        if self._choices is not None or self._fewshot is not None:  # the prompt varies
            count = min(count, len(self._chat) - 1)
        return count

    def messages(self, sample: Sample, dataset_path: str) -> list[Message]:
        return self.render(sample, dataset_path)[0]

    def render(
        self, sample: Sample, dataset_path: str
    ) -> tuple[list[Message], dict[str, MediaSource] | None]:
        """The messages, and where their media's bytes are (None without media). A
        message with media has parts: its text, then each image or document."""
        messages: list[Message] = [
            {"role": role, "content": template.render(sample, dataset_path)}
            for role, template in self._chat
        ]
        if self._choices is not None:
            asked = self._choices.render(sample, dataset_path)
            messages[-1]["content"] = lettered(asked.context, asked.options)
        elif self._fewshot is not None:
            messages[-1]["content"] = self._fewshot(sample, dataset_path)
        if not self._media_fields:
            return messages, None
        sources: dict[str, MediaSource] = {}
        for i, fields in self._media_fields.items():
            parts: list[dict[str, object]] = [{"type": "text", "text": messages[i]["content"]}]
            for field in fields:
                for resolved in self.media.resolve(sample, field, dataset_path):
                    parts.append(resolved.part)
                    sources[resolved.part["sha256"]] = resolved.source
            messages[i]["content"] = parts
        return messages, sources


def media_digest(spec: Spec, samples: Iterable[Sample], media_dir: Path, where: str) -> str | None:
    """A hash of the media files `samples` show under `spec` (None when it shows none):
    what `RunPlan.dataset_hash` adds to the data's hash, read without rendering."""
    fields = [*(spec.media or []), *(f for m in spec.messages or [] for f in m.media or [])]
    if not fields:
        return None
    resolver = MediaResolver(media_dir)
    for sample in samples:
        for field in fields:
            resolver.resolve(sample, field, where)
    return resolver.digest()
