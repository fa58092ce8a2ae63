"""A Python scorer for the tools suite: the answer names every expected value."""


def mentions_all(response: str, sample: dict[str, object]) -> tuple[float, str]:
    expected = sample["answer"]
    wanted = [str(x) for x in expected] if isinstance(expected, list) else [str(expected)]
    text = response.lower()
    missing = [w for w in wanted if w.lower() not in text]
    if not missing:
        return 1.0, f"mentions {', '.join(wanted)}"
    return 1 - len(missing) / len(wanted), f"does not mention {', '.join(missing)}"
