"""Every field of msg/*.msg and srv/*.srv (request and response) is a name each rosidl generator can
emit: not a keyword of C, C++ or Python, and of the form rosidl accepts. rosidl makes each field a
struct member (C), a class member (C++) and an attribute (Python) of that very name; `string template`
in VisualLabels.msg once broke colcon build (`visual_labels__struct.hpp: expected unqualified-id before
'template'`). The ros2 tier builds the messages for real; this says which name is wrong, and runs
everywhere."""

from __future__ import annotations

import keyword
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def words(text: str) -> frozenset[str]:
    return frozenset(text.split())


#: C17 keywords, with C23's new ones (bool, true, false, … are keywords there)
C_KEYWORDS = words(
    """
auto break case char const continue default do double else enum extern float for goto if inline int long
register restrict return short signed sizeof static struct switch typedef union unsigned void volatile while
_Alignas _Alignof _Atomic _Bool _Complex _Generic _Imaginary _Noreturn _Static_assert _Thread_local alignas
alignof bool constexpr false nullptr static_assert thread_local true typeof typeof_unqual _BitInt _Decimal32
_Decimal64 _Decimal128
"""
)
#: C++20 keywords and alternative operator tokens (and, or, not, …)
CXX_KEYWORDS = words(
    """
alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t char16_t char32_t class
compl concept const consteval constexpr constinit const_cast continue co_await co_return co_yield decltype
default delete do double dynamic_cast else enum explicit export extern false float for friend goto if inline
int long mutable namespace new noexcept not not_eq nullptr operator or or_eq private protected public register
reinterpret_cast requires return short signed sizeof static static_assert static_cast struct switch template
this thread_local throw true try typedef typeid typename union unsigned using virtual void volatile wchar_t
while xor xor_eq
"""
)
#: rosidl_adapter's rule for field names (parser.py: is_valid_field_name)
ROSIDL_FIELD = re.compile(r"^(?!.*__)(?!.*_$)[a-z][a-z0-9_]*$")


def fields(msg: Path) -> list[str]:
    """The field names of a .msg file, or of both halves of a .srv file (constants, `TYPE NAME=value`,
    included; the `---` line between a service's request and response is not a field)."""
    names = []
    for line in msg.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not (msg.suffix == ".srv" and line == "---"):
            names.append(re.split(r"[\s=]+", line)[1])
    return names


MESSAGES = sorted((ROOT / "msg").glob("*.msg")) + sorted((ROOT / "srv").glob("*.srv"))


def test_there_are_messages_to_check():
    assert [m.name for m in MESSAGES] == ["VisualFeatures.msg", "VisualLabels.msg", "VlmAnswer.msg",
                                          "QueryMemory.srv"]  # fmt: skip
    assert "prompt_template" in fields(ROOT / "msg" / "VisualLabels.msg")
    query = fields(ROOT / "srv" / "QueryMemory.srv")
    assert query[0] == "text" and query[-1] == "scores" and "ok" in query and "---" not in query


@pytest.mark.parametrize("msg", MESSAGES, ids=lambda p: p.stem)
def test_field_names_are_valid_in_c_cxx_and_python(msg):
    languages = (("C", C_KEYWORDS), ("C++", CXX_KEYWORDS), ("Python", frozenset(keyword.kwlist)))
    bad = {name: [lang for lang, words in languages if name in words] for name in fields(msg)}
    assert {n: langs for n, langs in bad.items() if langs} == {}
    assert [n for n in fields(msg) if not ROSIDL_FIELD.match(n)] == []


def test_the_check_catches_the_old_field():
    assert "template" in CXX_KEYWORDS and "template" not in C_KEYWORDS
    assert ROSIDL_FIELD.match("prompt_template") and not ROSIDL_FIELD.match("Template")
