"""A spec's prompt: the first messages of each sample's conversation, rendered."""

from gradetrail_lib.datasets.dataset import Sample
from gradetrail_lib.providers.base import Message
from gradetrail_lib.spec.spec import Spec
from gradetrail_lib.templating import Template


class PromptRenderer:
    """The first messages of a sample's conversation: `system` and `prompt`, or the
    spec's `messages:` chat, each content a template."""

    def __init__(self, spec: Spec) -> None:
        self._chat: list[tuple[str, Template]] = []
        if spec.messages is not None:
            for i, m in enumerate(spec.messages):
                self._chat.append((m.role, Template(m.content, f"messages[{i}].content")))
            return
        if spec.system is not None:
            self._chat.append(("system", Template(spec.system, "system")))
        assert spec.prompt is not None
        self._chat.append(("user", Template(spec.prompt, "prompt")))

    @property
    def shared_messages(self) -> int:
        """How many of the first messages every sample shares (their templates read no
        field): the prefix a prompt cache can hold."""
        count = 0
        for _, template in self._chat:
            if not template.constant:
                break
            count += 1
        return count

    def messages(self, sample: Sample, dataset_path: str) -> list[Message]:
        return [
            {"role": role, "content": template.render(sample, dataset_path)}
            for role, template in self._chat
        ]
