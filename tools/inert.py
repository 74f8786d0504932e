"""Text from logs, diffs, model output and playbooks is data: shown to a human it must not act
on the terminal or hide what it says. `inert` is the one function every display site uses (the
review prompt, `agent approvals`, report.md/html, launch.sh, progress lines).

What it changes, and why:
- C0/C1 control characters other than newline and tab (ESC, CR, BS, BEL, ...) become `\\x1b`-style
  escapes: `ESC[2K ESC[1G` erases a line on a terminal, a bare CR overprints it, so a diff line
  could hide behind a harmless one.
- Invisible and direction-changing Unicode (bidi overrides and isolates, zero-width characters,
  BOM, tag characters, variation selectors, fillers, line/paragraph separators) becomes
  `<U+202E>`: bidi controls reorder what a reviewer reads ("Trojan Source"), zero-width
  characters make two different names look the same.
`inert_line` also escapes newline and tab, for one-line fields (a table cell, a shell comment:
a newline there would end the comment and start a command).
"""
from __future__ import annotations

import unicodedata

# Invisible characters that are not in category Cf/Cc/Zl/Zp but render as nothing.
_INVISIBLE = {0x115F, 0x1160, 0x3164, 0xFFA0, 0x034F, 0x180E, 0x2800}


def _visible(ch: str, *, keep_newlines: bool) -> str:
    o = ord(ch)
    if ch in "\n\t" and keep_newlines:
        return ch
    if o < 0x20 or o == 0x7F or 0x80 <= o <= 0x9F:
        return {"\n": "\\n", "\t": "\\t", "\r": "\\r"}.get(ch, f"\\x{o:02x}")
    cat = unicodedata.category(ch)
    if (cat in ("Cf", "Zl", "Zp", "Co", "Cs", "Cn") or o in _INVISIBLE
            or 0xFE00 <= o <= 0xFE0F or 0xE0100 <= o <= 0xE01EF):  # variation selectors
        return f"<U+{o:04X}>"
    return ch


def inert(text: object) -> str:
    """`text` safe to print or embed for a human: newlines and tabs kept, everything that could
    move the cursor, recolour, reorder or hide text made visible."""
    s = "" if text is None else str(text)
    if s.isascii() and all(c in "\n\t" or 0x20 <= ord(c) < 0x7F for c in s):
        return s  # the common case, kept fast for large logs
    return "".join(_visible(c, keep_newlines=True) for c in s)


def inert_line(text: object) -> str:
    """`inert`, and one line: newline, CR and tab escaped too."""
    s = "" if text is None else str(text)
    return "".join(_visible(c, keep_newlines=False) for c in s)
