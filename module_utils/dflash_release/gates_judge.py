"""The reply judge of the smoke test: is this reply broken, the way a person reading it would say so?

Not "is it right" (the code and pattern gates do that) but "is it text": the host-side check
(``gates_output.degenerate``) catches one character or a 1-4 word cycle repeated; real broken replies
are subtler: token soup of subword pieces across scripts, UTF-8 read as Latin-1 in the middle of a
reply (mojibake), a sentence or a paragraph looping, a reply that replays the chat template or copies
its prompt / retrieved context. Each check below names ONE such breakage with its evidence; odd but
valid replies stay quiet: ``<think>`` blocks, tables, LaTeX, code, short answers, non-English text,
one leaked special token.

Runs on the controller only (the action plugin of ``dflash_wait`` judges the reply the smoke test
returned): ftfy (mojibake) and wordfreq (real-word and function-word shares per language) need not be
on the hosts. Language per script: the script of every letter comes from ``unicodedata``; inside a
script, the wordfreq language whose word list covers the reply best (no language-detector package:
lingua's wheel is ~100 MB). wordfreq's "small" lists only are read.

Thresholds are the named constants; each comment says how it was chosen: a priori from what a person
calls broken, then checked (not fitted) on real replies (tests/fixtures/replies/labelled/).
"""

from __future__ import annotations

import difflib
import math
import re
import unicodedata
from collections import Counter
from functools import cache, lru_cache

try:  # third-party, on the controller only (`make controller`); without them the gate does not run and says why
    import ftfy
    import ftfy.badness
    import wordfreq

    MISSING = None
except ImportError as exc:
    ftfy = wordfreq = None
    MISSING = str(exc)

GATE = "output.judge"
MAX_CHARS = 8000  # judged per text (the smoke test's replies are ~128 tokens)

# ----------------------------------------------------------------------------- thresholds
# whitespace
WS_RUN_MIN = 40  # a run of >= 40 whitespace chars is never layout (markdown/code use a few blank lines)
WS_SHARE_MIN = 0.60  # >= 60 % whitespace in a reply of >= WS_SHARE_MIN_LEN chars: more blank than text
WS_SHARE_MIN_LEN = 40
WS_ONLY_MIN = 2  # a reply of >= 2 whitespace chars and nothing else (no reasoning either): blank tokens, no answer
# one unbroken token made of one short piece repeated ('agyagyagy...', 'nynyny...'): a subword loop with no spaces
PERIODIC_TOKEN_MIN = 24  # chars of the token (words that long are compounds or identifiers, never periodic)
PERIODIC_MAX_UNIT = 8  # a piece of <= 8 chars ...
PERIODIC_COVER = 0.6  # ... repeated back to back over >= 60 % of the token
# dropped diacritics: a language written with accents (known from its words) with none left in the reply
DIACRITIC_LANGS = ("fr", "de", "es", "pt", "it", "cs", "pl", "sk", "sl", "hu", "ro", "tr", "lv", "lt", "vi", "is",
                   "ca", "da", "nb", "sv", "fi")
DIACRITIC_MIN_WORDS = 20  # judged on >= 20 words of the language ...
DIACRITIC_EXPECTED_MIN = 8  # ... where >= 8 words should carry an accent by the language's own rate (wordfreq): none
#                             at all then happens by chance < 0.1 % of the time (Poisson, e^-8)
# box-drawing and table borders: space runs between them are layout
BOX_CHARS = re.compile(r"[\u2500-\u257f|]")
# one punctuation / symbol character repeated ('！！！！', '……')
CHAR_RUN_MIN = 10  # '!!!' or '...' in prose stays far below; table / rule / box-drawing chars are exempt
WHOLE_SYMBOL_MIN = 4  # a reply that is one symbol repeated 4+ times and nothing else ('!!!!', '....')
CHAR_RUN_EXEMPT = set("-=_*#~`|:.─━═│┃+ \t\r\n")
# mojibake
MOJIBAKE_BADNESS_MIN = 2  # ftfy's badness counts suspicious sequences ('Ã©', 'â€', 'ä½'); one may be a real
#                           odd symbol, two plus a change by fix_text is mojibake
MOJIBAKE_WORD_MIN = 3  # letters of the repaired word ...
MOJIBAKE_WORD_ZIPF = 1.0  # ... found at zipf >= 1 (one in 10^8 words) in one language's list
REPLACEMENT_MIN = 2  # >= 2 U+FFFD (one can be a multibyte char cut at a stream end) ...
REPLACEMENT_SHARE = 0.01  # ... making >= 1 % of the chars: bytes decoded wrongly mid-reply
# loops at the end of the reply
LOOP_MAX_PERIOD = 40  # tokens; longer loops are the sentence check's
LOOP_MIN_REPEATS = 4  # a phrase repeated 4+ times back to back ...
LOOP_MIN_TOKENS = 12  # ... covering >= 12 tokens ('no no no no' alone is no loop)
CHAR_LOOP_MAX_PERIOD = 12  # the same on characters, for text without spaces ('哈哈哈', 'ingingin')
CHAR_LOOP_MIN_REPEATS = 8
CHAR_LOOP_MIN_CHARS = 24
SENT_MIN_CHARS = 20  # sentences shorter than this ('Yes.', '---') do not count as repeated
SENT_REPEAT_MIN = 3  # the same sentence 3+ times reads as a loop
SENT_DUP_SHARE = 0.40  # or repeated sentences making >= 40 % of the text
DISTINCT_4GRAM_MIN = 0.30  # < 30 % distinct word 4-grams over >= DISTINCT_MIN_WORDS words (prose/code > 0.8)
DISTINCT_MIN_WORDS = 40
CJK_GRAM = 6  # the same for text without spaces: character 6-grams ...
CJK_DISTINCT_MIN = 0.60  # ... < 60 % distinct (the labelled Chinese replies: 96-100 %) ...
CJK_LOOP_MIN_CHARS = 120  # ... over >= 120 CJK characters making half the text
STUTTER_MIN_WORDS = 6  # every token twice ('TheThe answer answer'): >= 30 % of words repeat the previous one
STUTTER_SHARE = 0.30  # or are doubled; prose has 0-2 % ('that that', 'had had')
# regurgitation
ROLE_MARKERS = re.compile(r"<\|im_start\|>|<\|start_header_id\|>|\[INST\]|<\|user\|>|<\|assistant\|>"
                          r"|<start_of_turn>|<\|system\|>|<\|begin_of_text\|>|<｜User｜>|<｜Assistant｜>")
ROLE_MARKERS_MIN = 2  # the model writing new chat turns replays the template; ONE trailing special token is a
#                       stripping bug of the server, noted only
# the same in plain-text templates (Alpaca's "### Instruction: / ### Response:", "User: / Assistant:"): a line that
# opens a turn with a role name. A reply may name one role ("Q:" in a FAQ, "User:" in an example); writing further
# turns of BOTH sides, several times, is the model going on with the dialogue past its own answer
TEXT_ROLE_LINE = re.compile(r"^[ \t]*(?:#{1,4}[ \t]*|\*\*)?(?P<role>Question|Response|Instruction|Input|Answer|User|Human"
                            r"|Assistant|AI|USER|ASSISTANT|HUMAN)[ \t]*(?:\*\*)?[ \t]*:", re.MULTILINE)
TEXT_ROLE_TURNS_MIN = 4  # >= 4 turn openings of >= 2 different roles (two invented exchanges)
PROMPT_ECHO_MIN = 2  # the prompt (>= PROMPT_MIN_CHARS) written out 2+ times
PROMPT_MIN_CHARS = 8
OVERLAP_NGRAM = 8  # word 8-grams copied from prompt / context ...
OVERLAP_SHARE = 0.60  # ... covering >= 60 % of a reply of >= OVERLAP_MIN_WORDS words (quoting a sentence or two
OVERLAP_MIN_WORDS = 30  # of the context stays far below)
# token soup
SOUP_SCRIPTS_MIN = 3  # letters of >= 3 non-Latin script groups (Han + kana one group), >= 2 letters each: no
#                       natural reply mixes Thai, Hebrew and Cyrillic
SOUP_MIN_WORDS = 8  # the word-share checks need >= 8 alphabetic words of the reply's main script
FUNC_ZIPF = 5.5  # a "function word": zipf >= 5.5 in the best language (its top ~300 words: the, of, и, der)
FUNC_SHARE_MIN = 0.10  # prose has 30-50 % function words; < 10 % on prose lines is word salad
SENT_LINE_MIN_WORDS = 6  # function-word share is taken on lines of >= 6 words (lists / headings exempt)
UNKNOWN_SHARE_MAX = 0.45  # > 45 % of words (3+ letters) absent from the best language's list: not language
RARE_HAN_SHARE = 0.15  # > 15 % of Han chars outside wordfreq's zh and ja lists (over >= 10): fluent Chinese
RARE_HAN_MIN = 10  # uses < 2 % such chars; token soup picks rare ones

LATIN_LANGS = ("en", "de", "fr", "es", "it", "pt", "nl", "pl", "cs", "sv", "da", "nb", "fi", "tr", "id", "ms", "lv",
               "lt", "hu", "ro", "ca", "vi", "fil", "sk", "sl", "is")
SCRIPT_LANGS = {"Latin": LATIN_LANGS, "Cyrillic": ("ru", "uk", "bg", "mk"), "Greek": ("el",),
                "Arabic": ("ar", "fa", "ur"), "Hebrew": ("he",), "Devanagari": ("hi",), "Bengali": ("bn",)}
GOOD_ENOUGH_COVER = 0.9  # a language covering >= 90 % of the words ends the search for a better one

_SCRIPT_PREFIX = (("LATIN", "Latin"), ("FULLWIDTH LATIN", "Latin"), ("CYRILLIC", "Cyrillic"), ("GREEK", "Greek"),
                  ("ARABIC", "Arabic"), ("HEBREW", "Hebrew"), ("THAI", "Thai"), ("HANGUL", "Hangul"),
                  ("HIRAGANA", "CJK"), ("KATAKANA", "CJK"), ("HALFWIDTH KATAKANA", "CJK"), ("CJK", "CJK"),
                  ("DEVANAGARI", "Devanagari"), ("BENGALI", "Bengali"))

# a line of code (kept out of the word checks: identifiers are no words of any language)
_CODE_LINE = re.compile(
    r"^\s*(?:def |class |import |from \S+ import|return\b|for .+:\s*$|while .+:\s*$|if .+:\s*$|elif |else:|try:"
    r"|except\b|with .+:\s*$|print\(|#|//|/\*|\*/|[{}\]\[]|@\w+|\w+\s*=[^=]|\w+(?:\.\w+)*\(.*\)\s*;?\s*$)"
    r"|[;{}]\s*$|^\s*\w+\s*\(.*\)\s*:\s*$"
)


# ----------------------------------------------------------------------------- helpers


@lru_cache(maxsize=65536)
def script_of(ch: str) -> str | None:
    if not ch.isalpha():
        return None
    name = unicodedata.name(ch, "")
    for prefix, group in _SCRIPT_PREFIX:
        if name.startswith(prefix):
            return group
    return name.split(" ")[0] or "OTHER"


def script_words(text: str) -> list[tuple[str, str]]:
    """Alphabetic runs split where the script changes -> [(word, script)]."""
    out, cur, cur_s = [], [], None
    for ch in text:
        s = script_of(ch)
        if s is None or (cur and s != cur_s):
            if cur:
                out.append(("".join(cur), cur_s))
            cur, cur_s = ([ch], s) if s else ([], None)
        else:
            cur.append(ch)
            cur_s = s
    if cur:
        out.append(("".join(cur), cur_s))
    return out


@cache
def _freq(lang: str) -> dict:
    return wordfreq.get_frequency_dict(lang, wordlist="small")


def _zipf(word: str, lang: str) -> float:
    # a dictionary lookup, no tokenizer (the zh / ja tokenizers need jieba / MeCab)
    f = _freq(lang).get(word.lower())
    return round(math.log10(f * 1e9), 2) if f else 0.0


def best_language(words: list[str], script: str) -> tuple[str | None, float]:
    """The language of ``script`` whose word list covers the most words -> (language, share covered)."""
    best: tuple[str | None, float] = (None, -1.0)
    for lang in SCRIPT_LANGS.get(script, ()):
        known = sum(_zipf(w, lang) > 0 for w in words) / len(words)
        if known > best[1]:
            best = (lang, known)
        if known >= GOOD_ENOUGH_COVER:
            break
    return best


_TOKEN_RE = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uf900-\ufaff\uac00-\ud7af]|[^\W\d_]+|\d+|[^\w\s]")


def tokens(text: str) -> list[str]:
    return _TOKEN_RE.findall(text)


def _sentences(text: str) -> list[str]:
    parts = re.split(r"(?<=[.!?。！？])\s+|\n+", text)
    return [re.sub(r"\s+", " ", p).strip().lower() for p in parts if p.strip()]


def prose(text: str) -> str:
    """The text without fenced code, code lines, table rows, URLs, inline code and math: what words are read in."""
    text = re.sub(r"```.*?(```|$)", " ", text, flags=re.DOTALL)
    keep = [ln for ln in text.splitlines()
            if not ln.lstrip().startswith("|") and not ln.startswith(("    ", "\t")) and not _CODE_LINE.search(ln)]
    text = "\n".join(keep)
    return re.sub(r"`[^`]*`|https?://\S+|<[^>\s]{1,40}>|\\\(.*?\\\)|\\\[.*?\\\]|\$[^$]*\$", " ", text, flags=re.DOTALL)


def _show(text: str, limit: int = 40) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ----------------------------------------------------------------------------- checks (each: (kind, reason) or None)


def check_whitespace(c: str):
    # horizontal runs on a line drawn with box-drawing / table borders are its layout (padding up to the border)
    c = "\n".join(re.sub(r"[ \t]+", " ", ln) if BOX_CHARS.search(ln) else ln for ln in c.split("\n"))
    run = max((len(m.group()) for m in re.finditer(r"\s+", c)), default=0)
    if run >= WS_RUN_MIN:
        return "whitespace_flood", f"whitespace flood: a run of {run} whitespace characters"
    share = sum(ch.isspace() for ch in c) / max(len(c), 1)
    if len(c) >= WS_SHARE_MIN_LEN and share >= WS_SHARE_MIN:
        return "whitespace_flood", f"whitespace flood: {share:.0%} of {len(c)} characters are whitespace"
    return None


def check_char_flood(c: str):
    whole = c.strip()
    if len(whole) >= WHOLE_SYMBOL_MIN and len(set(whole)) == 1 and not whole.isalnum():
        # the reply is one symbol and nothing else ('!!!!!!!'): no layout, no text (the run check wants 10 inside text)
        return "char_flood", f"character flood: the whole reply is {whole[0]!r} {len(whole)} times"
    best = (0, "")
    for m in re.finditer(r"(.)\1*", c, flags=re.DOTALL):
        ch, n = m.group(1), len(m.group())
        if ch not in CHAR_RUN_EXEMPT and not ch.isalnum() and n > best[0]:
            best = (n, ch)
    if best[0] >= CHAR_RUN_MIN:
        return "char_flood", f"character flood: {best[1]!r} {best[0]} times in a row"
    return None


def check_mojibake(c: str):
    fixed = ftfy.fix_text(c)
    bad = ftfy.badness.badness(c)
    if fixed != c and bad >= MOJIBAKE_BADNESS_MIN:
        sm = difflib.SequenceMatcher(None, c, fixed, autojunk=False)
        first = next(((i1, i2, j1, j2) for op, i1, i2, j1, j2 in sm.get_opcodes() if op != "equal"), None)
        changed = sum(i2 - i1 for op, i1, i2, _j1, _j2 in sm.get_opcodes() if op != "equal")
        sample = f"{c[first[0]:first[1]][:24]!r} -> {fixed[first[2]:first[3]][:24]!r}" if first else ""
        return "mojibake", (f"mojibake (UTF-8 read as another encoding): ftfy finds {bad} suspicious sequences and "
                            f"would repair {changed} characters, e.g. {sample}")
    if fixed != c:
        # one mojibake word is below the badness count: a word that ftfy's encoding repair (not its quote or width
        # clean-up) turns into a word of a language ('WÃ¶rter' -> 'Wörter'), while as written it is a word of none,
        # is UTF-8 read as Latin-1 all the same
        for raw in re.findall(r"\S*[^\x00-\x7f]\S*", c):
            word = re.sub(r"[\W\d_]+$|^[\W\d_]+", "", raw)
            good = re.sub(r"[\W\d_]+$|^[\W\d_]+", "", ftfy.fix_encoding(word))
            if good and good != word and len(good) >= MOJIBAKE_WORD_MIN and _known(good) and not _known(word):
                return "mojibake", (f"mojibake (UTF-8 read as another encoding): {word!r} is {good!r} with its "
                                    "multi-byte letters decoded as single bytes (ftfy repairs it)")
    return None


def _known(word: str) -> bool:
    """Whether ``word`` is a word of one of the Latin-script languages the judge knows (wordfreq)."""
    w = word.lower()
    return any(_zipf(w, lang) >= MOJIBAKE_WORD_ZIPF for lang in LATIN_LANGS)


def check_replacement(c: str):
    n = c.count("\ufffd")
    if n >= REPLACEMENT_MIN and n / max(len(c), 1) >= REPLACEMENT_SHARE:
        return "replacement_chars", f"replacement characters: {n} U+FFFD in {len(c)} characters (bytes that are no text)"
    return None


def _tail_repeat(seq: list, max_period: int, min_repeats: int, min_len: int):
    """(unit, repeats) of a unit repeated back to back at the end of ``seq`` (it may stop mid-unit)."""
    n = len(seq)
    for p in range(1, min(max_period, n // min_repeats) + 1):
        for cut in range(p):
            end = n - cut
            if end - p < 0:
                break
            unit = seq[end - p:end]
            reps, i = 1, end - p
            while i - p >= 0 and seq[i - p:i] == unit:
                reps += 1
                i -= p
            if reps >= min_repeats and reps * p >= min_len:
                return unit, reps
    return None


def _tail_loop(seq: list, max_period: int, min_repeats: int, min_len: int):
    """_tail_repeat, less a border or rule drawn with one symbol ('──────'): layout, the char flood check's business."""
    found = _tail_repeat(seq, max_period, min_repeats, min_len)
    return None if found and _layout("".join(found[0])) else found


def check_tail_loop(c: str):
    t = tokens(c)
    found = _tail_loop(t, LOOP_MAX_PERIOD, LOOP_MIN_REPEATS, LOOP_MIN_TOKENS)
    if found:
        unit, reps = found
        return "ngram_loop", (f"n-gram loop: {' '.join(unit)!r} repeated {reps} times back to back at the end "
                              f"({reps * len(unit)} of {len(t)} tokens)")
    squeezed = list(re.sub(r"\s+", "", c))
    found = _tail_loop(squeezed, CHAR_LOOP_MAX_PERIOD, CHAR_LOOP_MIN_REPEATS, CHAR_LOOP_MIN_CHARS)
    if found:
        unit, reps = found
        return "ngram_loop", f"character loop: {''.join(unit)!r} repeated {reps} times at the end"
    return None


def _layout(unit: str) -> bool:
    """A repeated unit without letters or digits made only of rule / table / box characters ('─', '-', '|', '=') is
    drawn layout; quotes, slashes or other punctuation repeated back to back ("'/'/'/") are a loop."""
    return not any(x.isalnum() for x in unit) and all(x in CHAR_RUN_EXEMPT or BOX_CHARS.match(x) for x in unit)


def check_periodic_token(c: str):
    """One unbroken token made of a short piece repeated back to back ('agyagyagy...ścścśc...'): a subword loop the
    word and sentence checks cannot see (no spaces), wherever it stands in the reply."""
    piece = re.compile(rf"(.{{1,{PERIODIC_MAX_UNIT}}}?)\1{{2,}}")
    for tok in re.findall(rf"\S{{{PERIODIC_TOKEN_MIN},}}", prose(c)):  # not in code, URLs or math
        runs = [m for m in piece.finditer(tok) if any(ch.isalpha() for ch in m.group(1))]
        covered = sum(len(m.group()) for m in runs)
        if covered / len(tok) >= PERIODIC_COVER:
            unit = max(runs, key=lambda m: len(m.group())).group(1)
            return "ngram_loop", (f"subword loop: one {len(tok)}-character token is short pieces repeated back to back "
                                  f"({covered / len(tok):.0%} of it, e.g. {unit!r}): {_show(tok, 40)!r}")
    return None


@cache
def _accent_rate(lang: str) -> float:
    """The share of running words of ``lang`` that carry a non-ASCII letter (wordfreq's small list, by frequency)."""
    freq = _freq(lang)
    total = sum(freq.values()) or 1.0
    return sum(f for w, f in freq.items() if not w.isascii() and any(ch.isalpha() for ch in w)) / total


def check_dropped_diacritics(c: str):
    """A language written with accents (DIACRITIC_LANGS, known from its words) whose reply has not one accented
    letter left, though that many of its words should carry one: the server (or its detokenizer) drops the multi-byte
    characters ('beaut', 'caf' for 'beauté', 'café'). Counted, not repaired word by word: the word lists keep the
    fragments too ('caf', 'pr')."""
    text = prose(c)
    if any(ch.isalpha() and not ch.isascii() for ch in text):
        return None
    words = [w for w, s in script_words(text) if s == "Latin"]
    if len(words) < DIACRITIC_MIN_WORDS:
        return None
    lang, _cover = best_language(words, "Latin")
    if lang not in DIACRITIC_LANGS:
        return None
    expected = len(words) * _accent_rate(lang)
    if expected >= DIACRITIC_EXPECTED_MIN:
        return "dropped_chars", (f"dropped accented letters: a {lang} reply of {len(words)} words without one accented "
                                 f"letter, where {lang} text has ~{expected:.0f} words with one "
                                 f"({_accent_rate(lang):.0%} of its words)")
    return None


def check_sentence_loop(c: str):
    sents = [s for s in _sentences(c) if len(s) >= SENT_MIN_CHARS]
    if sents:
        count = Counter(sents)
        top, k = count.most_common(1)[0]
        dup = sum(len(s) * (v - 1) for s, v in count.items() if v > 1)
        share = dup / max(sum(len(s) for s in sents), 1)
        if k >= SENT_REPEAT_MIN or (k >= 2 and share >= SENT_DUP_SHARE):
            return "sentence_loop", (f"sentence loop: {_show(top, 60)!r} {k} times; repeated sentences are "
                                     f"{share:.0%} of the text")
    words = [w.lower() for w in re.findall(r"\w+", c)]
    if len(words) >= DISTINCT_MIN_WORDS:
        grams = list(zip(words, words[1:], words[2:], words[3:]))
        ratio = len(set(grams)) / len(grams)
        if ratio < DISTINCT_4GRAM_MIN:
            return "ngram_loop", f"repetition: only {ratio:.0%} of {len(grams)} word 4-grams are distinct"
    # scripts written without spaces (Chinese, Japanese): the same on characters; a loop with small variations
    # ('要有自强不息、自强不息的战略思维，' again and again) has no exact tail period, but few distinct 6-grams
    chars = re.sub(r"\s+", "", prose(c))
    cjk = sum(1 for ch in chars if script_of(ch) in ("CJK", "Hangul"))
    if cjk >= CJK_LOOP_MIN_CHARS and cjk >= len(chars) / 2:
        grams = [chars[i:i + CJK_GRAM] for i in range(len(chars) - CJK_GRAM + 1)]
        ratio = len(set(grams)) / len(grams)
        if ratio < CJK_DISTINCT_MIN:
            return "ngram_loop", (f"repetition: only {ratio:.0%} of {len(grams)} character {CJK_GRAM}-grams are "
                                  "distinct (fluent Chinese / Japanese text: > 90 %)")
    return None


def check_stutter(c: str):
    words = re.findall(r"[^\W\d_]+|\d+", c)
    if len(words) < STUTTER_MIN_WORDS:
        return None
    rep = 0
    for i, w in enumerate(words):
        half = len(w) // 2
        doubled = len(w) >= 4 and len(w) % 2 == 0 and w[:half] == w[half:]
        if doubled or (i and w.lower() == words[i - 1].lower()):
            rep += 1
    if rep / len(words) >= STUTTER_SHARE:
        return "token_stutter", f"token stutter: {rep} of {len(words)} words repeat the one before or are doubled"
    return None


def check_regurgitation(c: str, prompt: str | None, context: str | None):
    roles = ROLE_MARKERS.findall(c)
    if len(roles) >= ROLE_MARKERS_MIN:
        return "regurgitation", (f"regurgitation: the reply writes {len(roles)} chat-template role markers "
                                 f"({roles[0]!r} ...): it replays the conversation instead of answering")
    turns = [m.group("role").lower() for m in TEXT_ROLE_LINE.finditer(c)]
    if len(turns) >= TEXT_ROLE_TURNS_MIN and len(set(turns)) >= 2:
        return "regurgitation", (f"invented dialogue turns: the reply opens {len(turns)} turns with role names "
                                 f"({', '.join(sorted(set(turns)))}): it writes the conversation on instead of "
                                 "answering and stopping (a chat template the model was not trained on?)")
    p = (prompt or "").strip()
    if len(p) >= PROMPT_MIN_CHARS and c.count(p) >= PROMPT_ECHO_MIN:
        return "regurgitation", f"regurgitation: the prompt {_show(p)!r} is written out {c.count(p)} times"
    src = " ".join(x for x in (prompt, context) if x)
    words = re.findall(r"\w+", c.lower())
    if src and len(words) >= OVERLAP_MIN_WORDS:
        sw = re.findall(r"\w+", src.lower())
        grams = {tuple(sw[i:i + OVERLAP_NGRAM]) for i in range(len(sw) - OVERLAP_NGRAM + 1)}
        covered = [False] * len(words)
        for i in range(len(words) - OVERLAP_NGRAM + 1):
            if tuple(words[i:i + OVERLAP_NGRAM]) in grams:
                covered[i:i + OVERLAP_NGRAM] = [True] * OVERLAP_NGRAM
        share = sum(covered) / len(words)
        if share >= OVERLAP_SHARE:
            return "regurgitation", f"regurgitation: {share:.0%} of the reply is copied from its prompt / context"
    return None


def check_soup(c: str):
    text = prose(c)
    sw = script_words(text)
    letters = Counter()
    for w, s in sw:
        letters[s] += len(w)
    nonlatin = sorted(s for s, n in letters.items() if s != "Latin" and n >= 2)
    if len(nonlatin) >= SOUP_SCRIPTS_MIN:
        return "token_soup", (f"token soup: letters of {len(nonlatin)} unrelated scripts ({', '.join(nonlatin)}) "
                              "in one reply")
    han = [ch for ch in text if script_of(ch) == "CJK" and "\u3400" <= ch <= "\u9fff"]
    if len(han) >= RARE_HAN_MIN:
        rare = [ch for ch in han if ch not in _freq("zh") and ch not in _freq("ja")]
        if len(rare) / len(han) > RARE_HAN_SHARE:
            return "token_soup", (f"token soup: {len(rare)} of {len(han)} Han characters are outside the Chinese and "
                                  f"Japanese word lists (e.g. {''.join(rare[:5])})")
    if not letters:
        return None
    # the reply's main alphabetic script only (English terms inside Korean or Chinese text are no prose of it)
    script = letters.most_common(1)[0][0]
    if script not in SCRIPT_LANGS:
        return None
    words = [w for w, s in sw if s == script]
    if len(words) < SOUP_MIN_WORDS:
        return None
    lang, _cover = best_language(words, script)
    long_words = [w for w in words if len(w) >= 3]
    unknown = sum(_zipf(w, lang) == 0 for w in long_words) / len(long_words) if long_words else 0.0
    if unknown > UNKNOWN_SHARE_MAX:
        return "token_soup", (f"token soup: {unknown:.0%} of {len(long_words)} {script} words are no {lang} words "
                              "(wordfreq)")
    sentence_words = []
    for line in text.splitlines():
        lw = [w for w, s in script_words(line) if s == script]
        if len(lw) >= SENT_LINE_MIN_WORDS:
            sentence_words += lw
    if len(sentence_words) >= SOUP_MIN_WORDS:
        func = sum(_zipf(w, lang) >= FUNC_ZIPF for w in sentence_words) / len(sentence_words)
        if func < FUNC_SHARE_MIN:
            return "token_soup", (f"word salad: only {func:.0%} of {len(sentence_words)} {script} words on sentence "
                                  f"lines are {lang} function words (prose has 30-50 %)")
    return None


def judge_text(text: str, prompt: str | None = None, context: str | None = None) -> list[tuple[str, str]]:
    """[(kind, reason)] of every breakage found in one text (empty: it reads like text)."""
    c = (text or "")[:MAX_CHARS]
    if not c.strip():
        return []
    checks = (check_whitespace(c), check_replacement(c), check_mojibake(c), check_char_flood(c),
              check_regurgitation(c, prompt, context), check_tail_loop(c), check_periodic_token(c),
              check_sentence_loop(c), check_stutter(c), check_soup(c), check_dropped_diacritics(c))
    return [h for h in checks if h]


def judge_reply(content: str | None, reasoning: str | None = None, prompt: str | None = None,
                context: str | None = None, *, finish_reason: str | None = None, thinking: bool | None = None) -> dict:
    """{broken, kind, detail, reasons, notes}: the verdict on a chat reply (content and reasoning_content
    both read; an empty pair is the host gate's to name). ``finish_reason`` (the choice's) and ``thinking`` (False:
    the request turned reasoning off, e.g. chat_template_kwargs enable_thinking false) tell a reasoning model's
    thinking cut by max_tokens (fine) from a finished answer that came back in the reasoning field only."""
    hits, notes = [], []
    for key, text in (("content", content), ("reasoning_content", reasoning)):
        for kind, reason in judge_text(text or "", prompt, context):
            hits.append((kind, f"{key}: {reason}" if reasoning and content else reason))
    c = content or ""
    if not c.strip() and (reasoning or "").strip() and (thinking is False or finish_reason == "stop"):
        # the reply ended (or reasoning was off) and the answer is all in reasoning_content: the client shows nothing
        # (a reasoning parser that does not fit the model's template, or thinking-off requests parsed as thinking)
        why = "the request turned reasoning off" if thinking is False else "the reply finished (finish_reason stop)"
        hits.append(("answer_in_reasoning", (f"no answer in content: {why}, yet all {len(reasoning)} characters came "
                                             "back in reasoning_content (does the server's --reasoning-parser fit "
                                             "this model's chat template?)")))
    if not hits and not (reasoning or "").strip() and len(c) >= WS_ONLY_MIN and not c.strip():
        # blank tokens only, and no reasoning beside them: the reply says nothing (a reasoning model's "\n\n" content
        # next to its reasoning is fine)
        hits.append(("whitespace_flood", f"whitespace only: the reply is {len(c)} whitespace characters and nothing else"))
    if not hits:
        if re.search(r"</?think>", c):
            notes.append("a <think> block is in the content (the server's reasoning parser is off?); the text is fine")
        m = re.search(r"(<eos>|</s>|<\|endoftext\|>|<\|im_end\|>|<\|eot_id\|>)\s*$", c)
        if m:
            notes.append(f"one trailing special token {m.group(1)!r} leaked (a stripping bug); the reply is fine")
    detail = "; ".join(r for _k, r in hits) if hits else ("; ".join(notes) or "the reply reads like text")
    return {"broken": bool(hits), "kind": hits[0][0] if hits else None, "detail": detail,
            "reasons": [r for _k, r in hits], "notes": notes}


def judge_gate(record: dict, prompt: str | None = None) -> dict:
    """The ``output.judge`` gate result of one smoke record (``reply`` as the smoke test returned it)."""
    if MISSING:
        return {"gate": GATE, "ran": False,
                "reason": f"the judge's libraries are missing on the controller ({MISSING}): make controller"}
    gates = {g.get("gate"): g for g in record.get("gates") or []}
    host = gates.get("output.degenerate")
    if host is None or not host.get("ran"):
        why = (host or gates.get("output") or {}).get("reason") or "the output gates did not run"
        return {"gate": GATE, "ran": False, "reason": f"no reply judged ({why})"}
    reply = record.get("reply") or {}
    if not (reply.get("content") or "").strip() and not (reply.get("reasoning_content") or "").strip():
        return {"gate": GATE, "ran": False, "reason": "no reply text came back to judge"}
    v = judge_reply(reply.get("content"), reply.get("reasoning_content"), prompt,
                    finish_reason=reply.get("finish_reason") or record.get("finish_reason"))
    return {"gate": GATE, "ran": True, "passed": not v["broken"], "figure": v["kind"] or "reads like text",
            "threshold": "no mojibake, token soup, loop or regurgitation", "detail": v["detail"]}
