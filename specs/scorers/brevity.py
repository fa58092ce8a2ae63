"""A Python scorer for the capitals spec: the answer should be the city's name alone."""


def just_the_city(response: str) -> tuple[float, str]:
    words = response.strip().rstrip(".").split()
    if len(words) <= 6:
        return 1.0, f"{len(words)} words"
    return 0.0, f"{len(words)} words, more than the city's name"
