"""Text for people: one line, shortened at a word with an ellipsis, never cut mid-word (no imports: the start-up
hook's modules use it in every process of a command)."""


def shorten(text: str, width: int) -> str:
    """`text` in at most `width` characters: whole words, and an ellipsis where some were left out."""
    text = " ".join(text.split())
    if len(text) <= width:
        return text
    cut = text[: width - 1]
    if " " in cut and not text[width - 1].isspace():
        cut = cut[: cut.rindex(" ")]
    return cut.rstrip(" ,;:") + "…"
