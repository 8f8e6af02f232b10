"""A poster's prose told apart from pasted evidence, line by line.

A ticket or a README mixes two things: what a program printed (log lines, frames, tracebacks,
tables, commands) and what a person wrote about it. Only the first is evidence in the sense the
knowledge rules mean: "the log says X". A sentence that *mentions* X ("we never saw
`EngineDeadError`", "the shm broadcast warning is a symptom") is context, and it may well be a
negation. So every pasted line is read as one of:

- ``evidence``: it has the shape of program output (a log prefix or level, a timestamp, a frame,
  an exception line, a key=value or table row, a shell prompt, inside a fenced block, …);
- ``prose``: it reads as a sentence written by a person: mostly words, few code characters, and
  the code it carries sits inside the sentence (inline backticks), not at its start; or it is
  part of a script the person pasted (a run of source lines that is no traceback): context too.

Program messages without their prefix read like sentences too ("No available shared memory
broadcast block found in 60 seconds."): the knowledge layer gives such a line back to the
evidence when a library's own message template matches it from its start
(:func:`hangdoctor.knowledge.matcher.view_of_evidence`).

Layer: parsers; may import: the standard library, hangdoctor.parsers, hangdoctor.snapshot and the
foundation.
"""

from __future__ import annotations

import functools
import re

# program output: a level word, a timestamp, a process/rank prefix, a frame, an exception line
_OUTPUT = re.compile(
    r"(?:^|[\]):|]\s*|\d\s+)(?:INFO|WARN(?:ING)?|ERROR|DEBUG|CRITICAL|FATAL|TRACE|NOTICE)\b[\s:\]]|^\s*[IWEF]\d{4} |"
    r"\d\d:\d\d:\d\d|^\s*\(\w*(?: \w+)?\s*pid=\d+|^\s*\([\w.:-]+(?:\s+pid=\d+[^)]*)?\)\s|^\s*\[(?:rank|TP|DP|PP|EP|PID|GPU)\s*\d|"
    r"^\s*\[\d+\]|^\s*\w+(?:\.\w+)*(?:Error|Exception|Warning|Interrupt|Exit)\b:?|"
    r"^\s*File \"|^\s*Thread \d+|^\s*#\d+\s+0x|^\s*at \w|^\s*Process \d+:|"
    r"^\s*[\w.-]+:\d+:\d+ \[\d+\]|^\s*NVRM|^\s*\[\s*\d+\.\d+\]|^\s*[$#>] |^\s*\w+@[\w.-]+[:$]|"
    r"\|\s|\s\|$|^\s*[\w.]+=\S|^\s*[\w./-]+\.(?:py|cc|cpp|cu|h|rs|go):\d+|it/s\]|%\|"
)
_INLINE_CODE = re.compile(r"`[^`]*`")
# a command line: options outside backticks, or a continuation backslash
_COMMAND = re.compile(r"(?:^|\s)--?[A-Za-z][\w-]*(?:[= ]|$)|\\\s*$|^\s*(?:sudo|docker|python3?|torchrun|vllm|"
                      r"pip|export|CUDA_\w+=|NCCL_\w+=)\b")
_WORD = re.compile(r"(?<!\w)[A-Za-z][A-Za-z'’-]*(?!\w)")  # "L40S", "4x", "sm_90" are no words
_CODE_CHARS = re.compile(r"[_(){}\[\]=<>/\\;:|$@#%*^~]")
# markup a person adds around prose: bullets, quotes, headings, numbered items, emphasis
_MARKUP_LEAD = re.compile(r"^\s*(?:>\s*)*(?:#{1,6}\s+|[-*+]\s+|\d+[.)]\s+)?")
_FENCE = re.compile(r"^\s*(?:>\s*)*(?:```|~~~)")

_TABLE_ROW = re.compile(r"^\|.*\|$")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")
_CJK_PUNCT = re.compile(r"[\u3000-\u303f\uff00-\uff65]")
MIN_WORDS = 6  # shorter lines are labels, table cells or values, not sentences


@functools.lru_cache(maxsize=1 << 16)  # a paste repeats its lines (64 MB of one line: bounded)
def is_prose(line: str) -> bool:
    """True when ``line`` reads as a sentence a person wrote, not as program output."""
    body = _MARKUP_LEAD.sub("", line, count=1).strip()
    if not body:
        return False
    if _TABLE_ROW.match(body):
        # a Markdown table of a person's: its cells are read as one sentence; a tool's table
        # (nvidia-smi, ps) is numbers and units, and stays evidence
        body = " ".join(c.strip() for c in body.strip("|").split("|"))
    if _OUTPUT.search(body):
        return False
    outside = _INLINE_CODE.sub(" ", body)
    if len(re.findall(r"(?:^|\s)--[A-Za-z]", outside)) >= 1 or _COMMAND.search(outside) and not re.search(r"[.!?]\s*$", outside):
        return False
    words = _WORD.findall(outside)
    # Chinese, Japanese and Korean run without spaces: two characters stand for a word
    cjk = len(_CJK.findall(outside))
    n_words = len(words) + cjk // 2
    if n_words < MIN_WORDS:
        return False
    letters = sum(len(w) for w in words) + cjk + len(_CJK_PUNCT.findall(outside))
    visible = sum(1 for ch in outside if not ch.isspace())
    if not visible or letters / visible < 0.72:
        return False
    # a few code characters in a sentence are punctuation; many make it code or output
    return len(_CODE_CHARS.findall(outside)) <= max(2, n_words // 5)


# what only a program prints, at the start of a line: in a written document (a README, a
# write-up) nothing else outside a fenced block is evidence
_STRONG_OUTPUT = re.compile(
    r"^\s*(?:\[?\d{4}-\d\d-\d\d[T ]\d\d:\d\d|\[?\d\d:\d\d:\d\d|[IWEF]\d{4} \d\d:|"
    r"(?:INFO|WARN(?:ING)?|ERROR|DEBUG|CRITICAL|FATAL)\b[\s:]|\(\w*(?: \w+)?\s*pid=\d+\)|"
    r"\[(?:rank|TP|DP|PP|EP)\d+\]|File \"|Traceback \(|Thread \d+ |#\d+\s+0x|NVRM:|\[\s*\d+\.\d+\] |"
    r"\w+(?:\.\w+)*(?:Error|Exception): )"
)
_HEADING = re.compile(r"^\s*#{1,6} \S")
# hangdoctor's own terminal summary pasted back: an analysis, not evidence of the hang
_OWN_OUTPUT = re.compile(r"^\s*(?:hangdoctor(?: demo)?: |\d+\. [a-z]+(?:-[a-z]+)+\s+\d\.\d\d (?:high|medium|low)\b|"
                         r"(?:next|try|known|odd one out|Most likely): )")


def is_document(lines: list[str]) -> bool:
    """A written document (Markdown with headings, or mostly sentences), not a paste of output."""
    nonblank = [x for x in lines if x.strip()]
    if not nonblank:
        return False
    headings = sum(1 for x in nonblank if _HEADING.match(x))
    return headings >= 3 or (headings >= 1 and sum(1 for x in nonblank if is_prose(x)) >= 0.3 * len(nonblank))


# a line of program source (Python, the language these posts carry): a script the poster ran is
# context like their sentences: `dist.destroy_process_group()` in it says what the script would
# do, not where a process is. A traceback's source lines follow a `File "…", line N` line and
# stay with the traceback.
_CODE = re.compile(
    r"^\s*(?:def \w+\(|class \w+[(:]|import \w|from [\w.]+ import |return\b|if .+:\s*(?:#.*)?$|"
    r"elif .+:\s*$|else:\s*$|for .+ in .+:\s*$|while .+:\s*$|with .+:\s*$|try:\s*$|except\b.*:\s*$|"
    r"finally:\s*$|@[\w.]+|[A-Za-z_][\w.]*(?:\[[^\]]*\])?\s*(?:[-+*/]?=)\s*[^=]|"
    # a call statement: nested calls inside it, a comment after it, or its arguments going on
    r"[A-Za-z_][\w.]*\([^)]*\)?\s*$|[A-Za-z_][\w.]*\(.*\)\s*#.*$|[A-Za-z_][\w.]*\((?:[^()]|\([^()]*\))*\)\s*$|"
    r"print\(|assert\b|pass\s*$|raise \w|[)\]}]+[,:]?\s*$)"
)
_TRACEBACK_FILE = re.compile(r'^\s*File "[^"]+", line \d+')
# what only source has: a keyword statement or an assignment with spaces (a printed record such
# as torch's multi-line ``WorkNCCL(\n  SeqNum=6,\n ...)`` has neither)
_STRONG_CODE = re.compile(r"^\s*(?:def |class |import |from [\w.]+ import |return\b|for .+ in .+:|if .+:|"
                          r"while .+:|with .+:|try:|except\b|print\(|[A-Za-z_][\w.\[\]\"']* = )")


def _code_runs(lines: list[str]) -> set[int]:
    """Indices of lines that belong to a pasted script: a run of at least 4 lines, most of them
    source, none a traceback's ``File "…"`` line (blank lines and comments inside keep the run)."""
    out: set[int] = set()
    i = 0
    n = len(lines)
    while i < n:
        if not _CODE.match(lines[i]):
            i += 1
            continue
        j = i
        code = 0
        strong = 0
        base = len(lines[i]) - len(lines[i].lstrip(" \t"))
        while j < n and (_CODE.match(lines[j]) or not lines[j].strip() or lines[j].lstrip().startswith("#")
                         or (len(lines[j]) - len(lines[j].lstrip(" \t")) > base
                             and not _OUTPUT.search(lines[j]))):
            if _TRACEBACK_FILE.match(lines[j]):
                code = -999
            if _CODE.match(lines[j]):
                code += 1
            if _STRONG_CODE.match(lines[j]):
                strong += 1
            j += 1
        if code >= 4 and strong >= 2:
            out.update(range(i, j))
        i = max(j, i + 1)
    return out


_FIRST_PERSON = re.compile(r"(?<![\w'])(?:I|we|We|our|Our|my|My|me|us|I'm|I've|we've|We've)(?![\w'])")


# the headings of the bug-report templates people fill in (.github/ISSUE_TEMPLATE of vLLM,
# PyTorch, SGLang, Ray, ollama, DeepSpeed, TGI, llama.cpp): a text shaped by one is a report of
# an incident, whatever its share of first-person words
_TEMPLATE_HEADING = re.compile(
    r"^\s*(?:#{1,6}\s*|\*\*)?(?:🐛\s*)?(?:Describe the bug|What happened(?: \+ What you expected to happen)?|"
    r"What is the issue\??|Your current environment|Steps to reproduce|To Reproduce|Reproduction(?: script)?|"
    r"Expected behaviou?r|Actual behaviou?r|System Info|Problem description(?: & steps to reproduce)?|"
    r"First Bad Commit|Versions / Dependencies|Relevant log output)\s*:?(?:\*\*)?\s*$", re.I)


def is_report(lines: list[str]) -> bool:
    """Whether a written text is someone's report of their own incident ("we run…", "my
    server…": ten first-person words in a thousand or more) rather than a write-up about hangs
    in general (a README, a design note: almost none)."""
    if any(_TEMPLATE_HEADING.match(x) for x in lines[:400]):
        return True
    words = sum(len(_WORD.findall(x)) for x in lines)
    if words < 20:
        return False
    first = sum(len(_FIRST_PERSON.findall(x)) for x in lines)
    return first * 1000 >= 10 * words


def split_prose(lines: list[str], document: bool | None = None) -> tuple[list[str], list[str]]:
    """``(evidence, prose)``, a pasted script counted with the prose (:func:`split_context`)."""
    evidence, prose, code = split_context(lines, document)
    return evidence, prose + code


def split_context(lines: list[str], document: bool | None = None) -> tuple[list[str], list[str], list[str]]:
    """``(evidence, prose)``: lines inside fenced blocks are evidence (that is what a poster
    fences), except hangdoctor's own summary; outside them, :func:`is_prose` decides, and in a
    written document (:func:`is_document`) only what a program alone prints stays evidence.
    Order within each list is kept; the third list is the lines of pasted scripts."""
    evidence: list[str] = []
    prose: list[str] = []
    scripts: list[str] = []
    if document is None:
        document = is_document(lines)
    fenced = False
    code = _code_runs(lines)
    for i, line in enumerate(lines):
        if _FENCE.match(line):
            fenced = not fenced
            evidence.append(line)
            continue
        if i in code:
            scripts.append(line)
        elif _OWN_OUTPUT.match(line):
            prose.append(line)
        elif fenced:
            evidence.append(line)
        elif is_prose(line) or (document and line.strip() and not _STRONG_OUTPUT.match(line)):
            prose.append(line)
        else:
            evidence.append(line)
    return evidence, prose, scripts
