"""The reveal's look-alike words: letters of another script that pass for Latin ones are marked where a reader
reads Latin (in an address, in a line of Latin text), and left alone in Russian, Greek or mixed prose.

The mixed-word rule (a Cyrillic a inside ``paypal``) is older and tested where the pages and the CLI use it.
"""

# ruff: noqa: RUF001

from __future__ import annotations

import itertools
import re
import unicodedata

from hypothesis import assume, given
from hypothesis import strategies as st

from armarius.textview import LATIN_LOOKALIKES, RUN_MIN, reveal

#: Latin letters and a Cyrillic letter that looks the same (U+0430 a, U+0441 c, U+0435 e, U+043E o, U+0440 p,
#: U+0445 x, U+0443 y, U+0456 i, U+04CF palochka as l, U+0455 s, U+0458 j, U+04BB h).
CYRILLIC_FOR = {"a": "\u0430", "c": "\u0441", "e": "\u0435", "o": "\u043e", "p": "\u0440", "x": "\u0445",
                "y": "\u0443", "i": "\u0456", "l": "\u04cf", "s": "\u0455", "j": "\u0458", "h": "\u04bb"}
#: "apple" and "paypal" spelt in Cyrillic letters only.
APPLE = "".join(CYRILLIC_FOR[letter] for letter in "apple")
PAYPAL = "".join(CYRILLIC_FOR[letter] for letter in "paypal")

# The prose below is written out, so that a reader sees it is Russian and Greek (ruff would flag each of its
# letters that looks Latin: RUF001); every disguise the tests build is spelt with escapes above.
RUSSIAN = (
    "Мы используем этот сервер уже год. Он сказал, а она ответила: «Хорошо, у нас всё есть».\n"
    "Рак, хор, сор, его и её — слова из букв, похожих на латинские. ООО «Ромашка» и СССР тоже.\n"
)
"""Two lines of Russian prose, with words made only of letters that look Latin: the conjunction a, the
preposition u, "crayfish", "choir", "litter", "his", "her", OOO (an LLC) and USSR."""

GREEK = (
    "Η Αθήνα είναι η πρωτεύουσα της Ελλάδας και ο Παρθενώνας βρίσκεται εκεί. Οι άνθρωποι να πάμε.\n"
)
"""Greek prose, with the article o and the particle "na" (nu alpha), whose letters look Latin."""

#: Sentences mixing Russian and Latin words as Russian- and German-speaking users write them.
MIXED_RUSSIAN = [
    "Установите numpy, pandas и scipy с pip",
    "Код на Python и C++ с помощью pip и conda",
    "Запустить pytest с флагом -n 2, а потом https://ru.wikipedia.org/wiki/Москва",
    "PDF-файл для IT-отдела, e-mail-адрес иван@mail.ru",
    "The Russian for hello is привет and for thanks спасибо.",
    "Grüße aus München an Иван, die Straße ist schön.",
]


#: A marker, of one character or of a run of one (its count).
MARKER = re.compile("\u27e6U\\+[0-9A-F]{4,6} [A-Z0-9 -]+?(?: \u00d7([0-9]+))?\u27e7")


def marked(text: str) -> int:
    """How many characters the reveal marks (a run's marker counts each of them)."""
    return sum(int(count or 1) for count in MARKER.findall(reveal(text))) - len(MARKER.findall(text))


# Examples -------------------------------------------------------------------------------------------------------


def test_an_address_spelt_in_look_alikes_is_marked_letter_by_letter() -> None:
    assert reveal(f"Log in at https://{APPLE}.com/login") == (
        "Log in at https://\u27e6U+0430 CYRILLIC SMALL LETTER A\u27e7\u27e6U+0440 CYRILLIC SMALL LETTER ER\u27e7"
        "\u27e6U+0440 CYRILLIC SMALL LETTER ER\u27e7\u27e6U+04CF CYRILLIC SMALL LETTER PALOCHKA\u27e7"
        "\u27e6U+0435 CYRILLIC SMALL LETTER IE\u27e7.com/login")
    # Whatever the text around it: an address is read as Latin even in a Russian sentence.
    login = "Войдите на сайт"  # "Log in at the site"
    assert marked(f"{login} https://{APPLE}.com/login") == 5
    # A host, an e-mail address, a path, a Windows path: the parts are joined by . @ / : or a backslash.
    for address in (f"www.{APPLE}.com", f"billing@{PAYPAL}.com", f"{PAYPAL}@example.com",
                    f"github.com/{PAYPAL}/sdk", f"C:\\Users\\{PAYPAL}\\keys", f"https://{APPLE}.com:443"):
        assert marked(f"{login} {address}") == sum(not char.isascii() for char in address), address


def test_other_scripts_look_alikes_in_an_address() -> None:
    greek_apple = "\u0391\u03a1\u03a1\u0399\u0395"  # APPIE in Greek capitals
    cherokee_apple = "\u13aa\u13e2\u13e2\u13de\u13ac"  # APPLE in Cherokee letters
    armenian_google = "\u0581\u0585\u0585\u0581\u04cf\u0435"  # g o o g (Armenian), l e (Cyrillic)
    for host in (greek_apple, cherokee_apple, armenian_google):
        assert marked(f"https://{host}.com") == len(host), host
    # With accents: U+0451 (Cyrillic io, like an e with a diaeresis) counts as its base letter.
    assert marked("https://\u0430\u0440\u0440\u04cf\u0451.com") == 5


def test_a_look_alike_word_in_latin_text_is_marked() -> None:
    pay = "".join(CYRILLIC_FOR[letter] for letter in "pay")
    assert reveal(f"Then {pay} the invoice.") == (
        "Then \u27e6U+0440 CYRILLIC SMALL LETTER ER\u27e7\u27e6U+0430 CYRILLIC SMALL LETTER A\u27e7"
        "\u27e6U+0443 CYRILLIC SMALL LETTER U\u27e7 the invoice.")
    assert marked(f"Then {pay} the invoice to Иван.") == 3, "a Russian name does not hide it"
    assert marked("Pay \u0430 fee") == 1, "one letter, in a line with no other Cyrillic"
    assert marked(f"Wire it to {PAYPAL} today") == 6
    # On a line of its own, the word is read as the whole text is.
    assert marked(f"Where to pay:\n{PAYPAL}\nbefore Friday.") == 6


def test_russian_and_greek_prose_stay_as_typed() -> None:
    assert reveal(RUSSIAN) == RUSSIAN
    assert reveal(GREEK) == GREEK
    assert reveal(RUSSIAN + GREEK) == RUSSIAN + GREEK
    # A Russian paragraph below an English one is read line by line.
    english = "Meeting notes from the review, with the decisions and who takes them on.\n"
    assert reveal(english + RUSSIAN) == english + RUSSIAN


def test_mixed_language_sentences_with_proper_russian_words_stay_as_typed() -> None:
    for sentence in MIXED_RUSSIAN:
        assert reveal(sentence) == sentence, sentence


def test_a_text_of_look_alike_words_alone_is_left_as_typed() -> None:
    """Nothing says such a text is read as Latin (a Russian title "Choir" or "Crayfish" is one)."""
    assert reveal(PAYPAL) == PAYPAL
    assert reveal("Хор") == "Хор"


def test_the_table_holds_letters_of_other_scripts_only() -> None:
    for char in LATIN_LOOKALIKES:
        name = unicodedata.name(char)
        assert char.isalpha(), name
        assert not name.startswith("LATIN"), name
        assert unicodedata.normalize("NFKC", char) == char, name
    assert set(CYRILLIC_FOR.values()) <= LATIN_LOOKALIKES


# Properties -----------------------------------------------------------------------------------------------------

_LOOKALIKE = st.sampled_from(sorted(LATIN_LOOKALIKES))
_LOOKALIKE_WORD = st.text(_LOOKALIKE, min_size=1, max_size=8)
_LATIN_WORD = st.text(st.sampled_from("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"), min_size=1, max_size=10)


@given(st.lists(st.one_of(_LATIN_WORD, _LOOKALIKE_WORD), min_size=1, max_size=12), _LATIN_WORD,
       st.sampled_from([" ", "\n", " - ", ", "]))
def test_every_look_alike_letter_in_latin_text_is_marked(words: list[str], latin: str, separator: str) -> None:
    """Latin words and words of look-alike letters of any script: each look-alike letter is a marker."""
    text = separator.join([latin, *words])
    assert marked(text) == sum(char in LATIN_LOOKALIKES for char in text)


@given(st.text(st.sampled_from("applepaypalgooglemicrosoftbank"), min_size=1, max_size=12),
       st.sampled_from(["https://{}.com/login", "{}@example.com", "mail.{}.co.uk", "/home/{}/.ssh"]))
def test_an_address_in_cyrillic_look_alikes_is_marked_in_russian_text(name: str, shape: str) -> None:
    """Whatever surrounds it, a Latin address whose name is spelt in Cyrillic look-alikes shows every one."""
    spelt = "".join(CYRILLIC_FOR.get(letter, letter) for letter in name)
    assume(spelt != name)
    text = f"{RUSSIAN}Ссылка: {shape.format(spelt)}\n"
    assert marked(text) == len(spelt) - len(spelt.encode("ascii", "ignore"))


_RUSSIAN_WORDS = RUSSIAN.replace("\n", " ").split()
_GREEK_WORDS = GREEK.replace("\n", " ").split()


@given(st.lists(st.sampled_from(_RUSSIAN_WORDS + _GREEK_WORDS), min_size=1, max_size=40),
       st.lists(st.sampled_from([" ", " ", " ", "\n", ", ", ". "]), min_size=40, max_size=40))
def test_russian_and_greek_words_in_any_order_stay_as_typed(words: list[str], separators: list[str]) -> None:
    text = "".join(word + separator for word, separator in zip(words, separators, strict=False))
    assert reveal(text) == text


@given(st.lists(st.sampled_from(_RUSSIAN_WORDS), min_size=1, max_size=20),
       st.lists(st.sampled_from(["numpy", "pip", "Python", "C++", "IT", "PDF-", "e-mail"]), max_size=6))
def test_a_russian_line_naming_latin_tools_stays_as_typed(russian: list[str], latin: list[str]) -> None:
    """A line whose Cyrillic letters (outside look-alike words) outnumber its Latin ones is Russian."""
    words = [word for pair in zip(russian, latin, strict=False) for word in pair] + russian[len(latin):]
    text = " ".join(words)
    cyrillic = sum(char.isalpha() and char not in LATIN_LOOKALIKES and not char.isascii() for char in text)
    assume(cyrillic > sum(char.isascii() and char.isalpha() for char in text))
    assert reveal(text) == text


# The rule, read slowly -------------------------------------------------------------------------------------------


def _script(char: str) -> str:
    return unicodedata.name(char).split(" ", 1)[0]


def _passes_for_latin(char: str) -> bool:
    return char in LATIN_LOOKALIKES or unicodedata.normalize("NFD", char)[0] in LATIN_LOOKALIKES


def model(text: str) -> set[int]:
    """Which letters the rule of the module's description marks, found word by word, as a person would."""
    marked: set[int] = set()
    judged: list[tuple[int, list[int]]] = []
    counts: list[tuple[int, int, set[str]]] = []
    offset = 0
    for number, line in enumerate(text.split("\n")):
        latin = other = 0
        for token in re.finditer(r"\S+", line):
            address = bool(re.search(r"\w[.:/@\\]+\w", token.group())) and any(
                char.isalpha() and _script(char) == "LATIN" for char in token.group())
            for word in re.finditer(r"\w+", token.group()):
                letters = [offset + token.start() + word.start() + i for i, char in enumerate(word.group())
                           if char.isalpha()]
                latins = [i for i in letters if _script(text[i]) == "LATIN"]
                if latins:
                    marked.update(i for i in letters if i not in latins)
                    latin += len(latins)
                elif letters and all(_passes_for_latin(text[i]) for i in letters):
                    if address:
                        marked.update(letters)
                    else:
                        judged.append((number, letters))
                else:
                    other += len(letters)
        written = {_script(char) for char in line if char.isalpha() and _script(char) != "LATIN"
                   and not _passes_for_latin(char)}
        counts.append((latin, other, written))
        offset += len(line) + 1
    whole = (sum(latin for latin, _, _ in counts), sum(other for _, other, _ in counts),
             {script for _, _, written in counts for script in written})
    for number, letters in judged:
        latin, other, written = counts[number] if counts[number][:2] != (0, 0) else whole
        if latin > other and (len(letters) > 1 or _script(text[letters[0]]) not in written):
            marked.update(letters)
    return marked


_ALPHABET = st.sampled_from(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ\u00e9\u00df"  # Latin
    "\u0430\u0441\u0435\u043e\u0440\u0443\u0445\u0456\u04cf\u0451\u0421\u041e"  # Cyrillic that looks Latin
    "\u0436\u0438\u0434\u043b\u044f\u0431"  # Cyrillic that does not
    "\u03bf\u03b1\u03bd\u03bb\u03c0\u0585\u13aa"  # Greek both kinds, an Armenian o, a Cherokee A
    "01_ \n.:/@\\-,"
)


@given(st.text(_ALPHABET, max_size=80))
def test_the_reveal_marks_what_the_rule_says(text: str) -> None:
    expected = model(text)
    shown = []
    # A run of one marked letter, RUN_MIN or more in a row, is one marker with its count.
    for (char, mark), run in itertools.groupby(enumerate(text), key=lambda item: (item[1], item[0] in expected)):
        count = len(list(run))
        if not mark:
            shown.append(char * count)
            continue
        marker = f"\u27e6U+{ord(char):04X} {unicodedata.name(char)}"
        shown.append(f"{marker}\u27e7" * count if count < RUN_MIN else f"{marker} \u00d7{count}\u27e7")
    assert reveal(text) == "".join(shown)
