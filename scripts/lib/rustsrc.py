"""Reading Rust source without a parser, for the layout checks (scripts/tests/module-cycles.sh,
scripts/layout.sh); python3 standard library only.

`strip` blanks comments and string and character literals, `without_tests` blanks the bodies of
`#[cfg(test)]` modules. Both keep every newline and every offset, so a position in their output
is the same line and column in the file."""
import re


def _blank(span):
    return "".join("\n" if c == "\n" else " " for c in span)


def strip(text):
    """`text` with comments, string and character literals blanked."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        start = i
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        elif (m := re.match(r'b?r(#*)"', text[i:i + 260])) and (
            i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")
        ):
            end = '"' + m.group(1)
            j = text.find(end, i + m.end())
            i = n if j < 0 else j + len(end)
        elif c == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            i += 1
        elif c == "'" and (
            m := re.match(r"'(\\(x[0-9a-fA-F]{2}|u\{[0-9a-fA-F]+\}|.)|[^\\'])'", text[i:i + 16])
        ):
            i += m.end()
        else:
            out.append(c)
            i += 1
            continue
        out.append(_blank(text[start:i]))
    return "".join(out)


def test_spans(code):
    """(start, end) offsets of each `#[cfg(test)]` module in stripped `code`."""
    spans, pos = [], 0
    for m in re.finditer(r"#\[cfg\(test\)\]\s*(pub(\([^)]*\))?\s+)?mod\s+\w+\s*\{", code):
        if m.start() < pos:
            continue
        depth, i = 1, m.end()
        while i < len(code) and depth:
            depth += {"{": 1, "}": -1}.get(code[i], 0)
            i += 1
        spans.append((m.start(), i))
        pos = i
    return spans


def without_tests(code):
    """Stripped `code` with its `#[cfg(test)]` modules blanked."""
    out, pos = [], 0
    for start, end in test_spans(code):
        out.append(code[pos:start])
        out.append(_blank(code[start:end]))
        pos = end
    out.append(code[pos:])
    return "".join(out)
