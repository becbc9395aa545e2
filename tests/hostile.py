"""Hypothesis strategies for hostile contact files as bytes: every encoding the reader accepts,
quoting (minimal, everywhere, broken), quoted delimiters and line breaks, CR/LF/CRLF, NUL and
undecodable bytes, ragged rows, overlong fields, blank lines, repeated and pre-existing keys.

The expected outcome is not known row by row: these files feed differential tests, where two
implementations (the compiled hot path and the pure reference) must agree on everything.
"""

from __future__ import annotations

from hypothesis import strategies as st

from tests.support import bad_cpf, cpf

HEADERS = ["nome", "cpf", "email", "celular", "whatsapp", "endereco", "plano", "Cidade", "cpf"]
KEYS = [cpf(i) for i in range(1, 9)]
ENCODINGS = ("utf-8", "utf-8-sig", "cp1252", "utf-16")
LINE_ENDS = ("\n", "\r\n", "\r")
# Text every accepted encoding can carry (cp1252 has no CJK or emoji).
LATIN_TEXT = st.text(
    alphabet=st.characters(codec="cp1252", exclude_categories=("Cs", "Cc")), max_size=12
)
ANY_TEXT = st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=12)
TRICKY = ["", " ", ",", ";", '"', '""', "a,b", 'Jo"ão', "x\ny", "x\r\ny", "\t", "=1+2", "\x00"]


def _key(draw: st.DrawFn) -> str:
    index = draw(st.integers(0, len(KEYS) - 1))
    key = KEYS[index]
    return draw(
        st.sampled_from(
            [
                key,
                f"{key[:3]}.{key[3:6]}.{key[6:9]}-{key[9:]}",
                key.lstrip("0") or "0",
                f" {key} ",
                bad_cpf(index + 1),
                "",
                "12.345.678/0001-95",
                "ABC123",
            ]
        )
    )


def _value(draw: st.DrawFn, column: str, text: st.SearchStrategy[str]) -> str:
    if column == "cpf":
        return _key(draw)
    if column in {"celular", "whatsapp"}:
        return draw(
            st.sampled_from(
                [
                    "(11) 91234-5678",
                    "+55 21 99876-5432",
                    "11912345678",
                    "123",
                    "",
                    "+1 202 555 0143",
                ]
            )
        )
    if column == "email":
        return draw(st.sampled_from(["a@x.com.br", "B@X.COM.BR", "bad-email", "", "ç@ß.de"]))
    return draw(st.one_of(text, st.sampled_from(TRICKY)))


def _cell(draw: st.DrawFn, value: str, quoting: str) -> str:
    needs = any(c in value for c in ',"\r\n') or value != value.strip()
    if quoting == "all" or (quoting == "minimal" and needs):
        return '"' + value.replace('"', '""') + '"'
    if quoting == "broken" and draw(st.booleans()):
        return '"' + value  # an unterminated quote: the reader's problem to report
    return value


@st.composite
def hostile_csv(draw: st.DrawFn, max_rows: int = 12) -> bytes:
    encoding = draw(st.sampled_from(ENCODINGS))
    text = LATIN_TEXT if encoding == "cp1252" else ANY_TEXT
    delimiter = draw(st.sampled_from([",", ";"]))
    quoting = draw(st.sampled_from(["minimal", "minimal", "all", "broken"]))
    header = draw(st.lists(st.sampled_from(HEADERS), min_size=1, max_size=6).map(_with_key))
    lines = [delimiter.join(header)]
    for _ in range(draw(st.integers(0, max_rows))):
        width = draw(st.sampled_from([len(header)] * 6 + [0, 1, len(header) + 1]))
        columns = [header[i] if i < len(header) else "extra" for i in range(width)]
        values = [_value(draw, column, text) for column in columns]
        if draw(st.integers(0, 9)) == 0 and values:  # an overlong field
            values[-1] = "x" * draw(st.integers(40, 120))
        cells = [
            _cell(draw, value.replace(delimiter, " ") if quoting == "broken" else value, quoting)
            for value in values
        ]
        lines.append(delimiter.join(cells))
    ends = [draw(st.sampled_from(LINE_ENDS)) for _ in lines]
    body = "".join(line + end for line, end in zip(lines, ends, strict=True))
    data = body.encode(encoding, errors="replace")
    return _damaged(draw, data)


def _with_key(header: list[str]) -> list[str]:
    return header if "cpf" in header else ["cpf", *header]


def _damaged(draw: st.DrawFn, data: bytes) -> bytes:
    """Now and then a NUL or an undecodable byte somewhere after the header."""
    for _ in range(draw(st.integers(0, 2))):
        if len(data) < 4:
            break
        at = draw(st.integers(len(data) // 2, len(data) - 1))
        data = data[:at] + draw(st.sampled_from([b"\x00", b"\xff", b"\xc3", b"\x81"])) + data[at:]
    return data
