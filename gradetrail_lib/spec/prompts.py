"""A spec's prompt: the first messages of each sample's conversation, rendered."""

from gradetrail_lib.datasets.dataset import Sample
from gradetrail_lib.providers.base import Message
from gradetrail_lib.spec.choices import ChoiceRenderer, FewShot, fewshot_prompt, lettered
from gradetrail_lib.spec.spec import Spec
from gradetrail_lib.templating import Template


class PromptRenderer:
    """The first messages of a sample's conversation: `system` and `prompt`, or the
    spec's `messages:` chat, each content a template. With `fewshot`, the prompt follows
    its examples (`spec.choices`); a multiple-choice spec answered by generation asks
    with lettered options (`choices`)."""

    def __init__(
        self, spec: Spec, fewshot: FewShot | None = None, choices: ChoiceRenderer | None = None
    ) -> None:
        self._choices = choices
        self._fewshot = None
        if fewshot is not None and spec.fewshot is not None and spec.fewshot.answer is not None:
            assert spec.prompt is not None
            answer = Template(spec.fewshot.answer, "fewshot.answer")
            self._fewshot = fewshot_prompt(fewshot, Template(spec.prompt, "prompt"), answer)
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
        if self._choices is not None or self._fewshot is not None:  # the prompt varies
            count = min(count, len(self._chat) - 1)
        return count

    def messages(self, sample: Sample, dataset_path: str) -> list[Message]:
        messages = [
            {"role": role, "content": template.render(sample, dataset_path)}
            for role, template in self._chat
        ]
        if self._choices is not None:
            asked = self._choices.render(sample, dataset_path)
            messages[-1]["content"] = lettered(asked.context, asked.options)
        elif self._fewshot is not None:
            messages[-1]["content"] = self._fewshot(sample, dataset_path)
        return messages
