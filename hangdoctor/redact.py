"""Redaction of secrets, applied before anything is written.

Stdlib only and Python 3.8 compatible: this module travels with the probe to remote hosts.

Secrets are recognised two ways, because collectors that redact by key name alone leak:
- by **key**: environment variables and ``--flag value`` arguments whose name looks secret
  (``*TOKEN*``, ``*KEY*``, ``*SECRET*``, ``*PASSWORD*``, ``*CREDENTIAL*``, cloud credentials);
- by **value**: strings shaped like a secret wherever they appear (HF tokens ``hf_...``,
  ``sk-...`` keys, AWS key ids, bearer tokens, ``user:pass@`` in URLs, JWT-looking strings,
  private key blocks), in command lines, log lines, py-spy locals and free text.

Layer: foundation; may import: the standard library only.
"""

from __future__ import annotations

import re

# Annotations only (PEP 563): typing is not imported at run time, which saves the probe
# ~5 ms on a remote host's bare interpreter (python3 -S).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional

MASK = "[REDACTED]"

# Key names that carry secrets. Matched case-insensitively against the whole key.
_SECRET_KEY = re.compile(
    r"(TOKEN|SECRET|PASSW(OR)?D|PASSWD|PWD$|CREDENTIAL|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|"
    r"(^|_)KEY($|_)|AUTH|COOKIE|SESSION_?ID|SIGNATURE|DSN$|CONN(ECTION)?_?STR|"
    r"^AWS_|^AZURE_CLIENT|^GOOGLE_APPLICATION_CREDENTIALS$|^GCP_|^WANDB_API|^HF_HUB_TOKEN$|"
    r"(^|_)PASS($|_)|PASSPHRASE|SSHPASS|PASSWORD|(^|_)CREDS?($|_))",
    re.IGNORECASE,
)
# Keys that match the pattern above but are known to be harmless and useful in a report.
_SAFE_KEYS = frozenset(
    {
        "TORCH_NCCL_ASYNC_ERROR_HANDLING",
        "NCCL_IB_HCA",
        "KEYTIMEOUT",
        "SSH_AUTH_SOCK",
        "XAUTHORITY",
        "PYTHONHASHSEED",
        "TOKENIZERS_PARALLELISM",
        "VLLM_USE_V1",
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "PWD",  # the shell's working directory, not a password (DB_PWD still is one)
        "OLDPWD",
    }
)

# Command-line flags whose *next* argument (or ``=value``) is secret.
_SECRET_FLAG = re.compile(
    r"^--?[A-Za-z0-9_.-]*(token|secret|passw(or)?d|passwd|api[-_]?key|access[-_]?key|"
    r"private[-_]?key|credential|auth|cookie|jwt|bearer|session|signature|"
    r"[-_]key(?=$|[-_])|[-_]pwd$|(?<=-)pass(?:phrase)?(?=$|[-_]))[A-Za-z0-9_.-]*$|^-p$",
    re.IGNORECASE,
)

# Every pattern below does bounded work per character: a token starts only where a run of its
# characters starts (a look-behind, never ``\b``, since ``_`` is a word character and
# ``OPENAI_API_KEY`` must still be seen), and repeats are capped. One 200 KB log line of
# ``a.a.a...`` took 78 s through the old URL pattern (quadratic), holding the GIL.
_NOT_AFTER_ALNUM = r"(?<![A-Za-z0-9])"
_NOT_IN_TOKEN = r"(?<![A-Za-z0-9_-])"
_VALUE_PATTERNS = [
    # Hugging Face tokens
    re.compile(_NOT_AFTER_ALNUM + r"hf_[A-Za-z0-9]{20,}"),
    # OpenAI-style / generic sk- keys (sk-..., sk-proj-...), Stripe sk_live_ / rk_test_
    re.compile(_NOT_IN_TOKEN + r"sk-[A-Za-z0-9_-]{16,}"),
    re.compile(_NOT_IN_TOKEN + r"[sr]k_(?:live|test)_[A-Za-z0-9]{10,}"),
    # AWS access key ids
    re.compile(_NOT_AFTER_ALNUM + r"(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{16}(?![A-Z0-9])"),
    # GitHub / GitLab / Slack / npm / PyPI / Databricks / Google OAuth tokens
    re.compile(_NOT_AFTER_ALNUM + r"(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})"),
    re.compile(_NOT_AFTER_ALNUM + r"glpat-[A-Za-z0-9_-]{20,}"),
    re.compile(_NOT_AFTER_ALNUM + r"xox[abposre]-[A-Za-z0-9-]{10,}"),
    re.compile(_NOT_AFTER_ALNUM + r"npm_[A-Za-z0-9]{30,}"),
    re.compile(_NOT_AFTER_ALNUM + r"pypi-[A-Za-z0-9_-]{40,}"),
    re.compile(_NOT_AFTER_ALNUM + r"dapi[a-f0-9]{32}(?:-\d+)?"),
    re.compile(_NOT_AFTER_ALNUM + r"ya29\.[A-Za-z0-9_-]{20,}"),
    # Google API keys
    re.compile(_NOT_AFTER_ALNUM + r"AIza[0-9A-Za-z_-]{35}"),
    # Slack / Discord webhook URLs: the path is the credential
    re.compile(r"(?<=hooks\.slack\.com/)(?:services|workflows|triggers)/[A-Za-z0-9/_-]{8,}"),
    re.compile(r"(?<=discord\.com/api/webhooks/)[0-9]{5,}/[A-Za-z0-9_-]{20,}"),
    # JWT-looking strings: three base64url parts, the first two starting with eyJ
    re.compile(_NOT_IN_TOKEN + r"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),
    # PEM private key blocks (also when squeezed onto one line); one cut across lines is
    # handled by redact_lines, which carries "inside a key block" from line to line
    re.compile(
        r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----.*?"
        r"(?:-----END [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----|$)",
        re.DOTALL,
    ),
]
# the literal part each value pattern needs (lower case), in _VALUE_PATTERNS' order
_VALUE_NEEDLES = [
    ("hf_",), ("sk-",), ("k_live_", "k_test_"),
    ("akia", "asia", "agpa", "aida", "aroa", "anpa", "anva", "aipa"),
    ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"), ("glpat-",), ("xox",), ("npm_",),
    ("pypi-",), ("dapi",), ("ya29.",), ("aiza",), ("hooks.slack.com",), ("discord.com",),
    ("eyj",), ("-----begin",),
]
assert len(_VALUE_NEEDLES) == len(_VALUE_PATTERNS)
# one of these occurs in every label the label patterns can match
_WORD_NEEDLES = ("token", "secret", "pass", "pwd", "key", "cred", "auth", "cookie", "session",
                 "sig", "sas", "jwt", "bearer", "login")
# "Bearer xyz" / "Basic xyz": keep the scheme, hide the credential.
_SCHEME = re.compile(r"(?i)(?<![A-Za-z0-9_-])((?:bearer|basic|token)\s+)([A-Za-z0-9._~+/=:-]{6,})")
# Cookie: / Set-Cookie: headers: the whole value is credentials.
_COOKIE = re.compile(r"(?i)(?<![A-Za-z0-9_-])((?:set-)?cookie[\"']?\s*[:=]\s*)([^\r\n]+)")
# Labelled values, "Authorization: xyz", "OPENAI_API_KEY=xyz", "\"refresh_token\": \"xyz\"",
# "Namespace(openai_api_key='xyz')": any name that *ends* in a secret word (so
# max_num_batched_tokens and tokenizer are not hidden). A scheme word after the label is left
# for _SCHEME.
_SECRET_WORDS = (
    r"token|secret|password|passwd|pwd|passphrase|pass|api[-_]?key|apikey|access[-_]?key|"
    r"private[-_]?key|secret[-_]?key|signing[-_]?key|key|credentials?|auth|authorization|"
    r"cookie|session[-_]?id|session|signature|sig|sas|jwt|bearer"
)
_LABELLED = re.compile(
    r"(?i)(?<![A-Za-z0-9_.-])((?:[A-Za-z0-9_.-]{0,80}?[-_.])?(?:" + _SECRET_WORDS + r"))"
    r"(\\?[\"']?\s{0,8}[:=]\s{0,8}\\?)"
    r"(?:\"((?:[^\"\\\r\n]|\\[^\"\r\n]|\\\"(?![\s,;:}\]]|$)){1,4096})\\?\"|"
    r"'((?:[^'\\\r\n]|\\[^\r\n]){1,4096})\\?'|([^\s\"'\\&)}\]]{1,4096}))"
)
# camelCase and glued names: accessToken=, clientSecret: , dbPassword=, PGPASSWORD=, APITOKEN=
_CAMEL_WORDS = r"Token|Secret|Password|Passwd|Pwd|Passphrase|Pass|ApiKey|Apikey|AccessKey|PrivateKey|Key|Credentials?|Auth"
_GLUED_WORDS = r"PASSWORD|PASSWD|PASSPHRASE|PASS|PWD|TOKEN|SECRET|APIKEY|ACCESSKEY|CREDENTIALS?"
_CAMEL = re.compile(
    r"(?<![A-Za-z0-9_.-])((?:[a-z][a-z0-9]{0,40}(?:[A-Z][a-z0-9]{0,40}){0,6}?(?:" + _CAMEL_WORDS
    + r"))|(?:[A-Z][A-Z0-9]{0,40}?(?:" + _GLUED_WORDS + r")))"
    r"(\\?[\"']?\s{0,8}[:=]\s{0,8}\\?)"
    r"(?:\"((?:[^\"\\\r\n]|\\[^\"\r\n]|\\\"(?![\s,;:}\]]|$)){1,4096})\\?\"|"
    r"'((?:[^'\\\r\n]|\\[^\r\n]){1,4096})\\?'|([^\s\"'\\&)}\]]{1,4096}))"
)
# a secret label whose value is a list or tuple: vLLM's "non-default args: {'api_key':
# ['K1', 'K2']}", requests' "auth=('user', 'pass')": every string inside is masked
_LABELLED_SEQ = re.compile(
    r"(?i)(?<![A-Za-z0-9_.-])((?:[A-Za-z0-9_.-]{0,80}?[-_.])?(?:" + _SECRET_WORDS + r"|"
    r"credentials?|creds|login)|[a-z][a-z0-9]{0,40}(?:" + _CAMEL_WORDS + r"))"
    r"([\"']?\s{0,8}[:=]\s{0,8})([\[(][^\])\r\n]{0,512}[\])])"
)
_QUOTED = re.compile(r"\"(?:[^\"\\]|\\.){0,4096}\"|'(?:[^'\\]|\\.){0,4096}'")
# "password X" (.netrc) or a secret word, a tab, its value
_NETRC = re.compile(
    r"(?im)((?:^[ \t]{0,16}|(?<![A-Za-z0-9_.-])login[ \t]{1,8}[^\s]{1,256}[ \t]{1,8})"
    r"(?:password|passwd|passphrase)[ \t]{1,8}|(?<![A-Za-z0-9_.-])"
    r"(?:[A-Za-z0-9_.-]{0,80}?[-_.])?(?:" + _SECRET_WORDS + r")\t{1,8})([^\s\"']{1,4096})"
)
# curl -u user:pass, --user user:pass, sshpass -p X / -pX, mysql -pPASS
_CURL_USER = re.compile(r"(?<![A-Za-z0-9_.-])(-u|--user|--proxy-user)([ \t=]{1,8}['\"]?[^\s:'\"]{0,256}:)([^\s'\"]{1,4096})")
_SSHPASS = re.compile(r"(?<![A-Za-z0-9_.-])(sshpass[ \t]{1,8}-p[ \t]{0,8})([^\s'\"]{1,4096})")
_GLUED_P = re.compile(r"(?<![A-Za-z0-9_.-])((?:mysql[a-z]{0,10}|mariadb[a-z-]{0,10}|sshpass|psql)"
                      r"(?:[ \t]{1,8}[^\s]{1,200}){0,8}?[ \t]{1,8}-p)([^\s'\"-][^\s'\"]{2,4095})")
# --api-key K1 K2 (vLLM takes several keys): every word up to the next flag
_API_KEYS = re.compile(
    r"(?i)(?<![A-Za-z0-9_.-])(--(?:[a-z0-9]+-)?api-key(?:s)?[ \t]{1,8}[^\s'\"]{1,4096})"
    r"((?:[ \t]{1,8}(?!-)[^\s'\"]{1,4096}){1,16})"
)
# HTTP Digest credentials: everything after the scheme (username, nonce, response=...)
_DIGEST = re.compile(r"(?i)(?<![A-Za-z0-9_-])(digest[ \t]{1,8})(?=[a-z]{1,20}=)([^\r\n]{1,4096})")
# Values a secret-named label may carry that are not secrets: keep them (they tell a reader
# whether a token was set at all).
_HARMLESS_VALUE = re.compile(
    r"(?i)^(?:true|false|none|null|yes|no|0|1|\*+|-|\[REDACTED\]|value|values|\.\.\.|<[^<>]{0,40}>)$")
# ``--api-key value`` inside a log line or a printed command
# (also as a list's repr, ``['--api-key', 'value']``, where ``-p`` counts too)
_FLAG_IN_TEXT = re.compile(
    r"(?<![A-Za-z0-9_.-])(--[A-Za-z][A-Za-z0-9_.-]{0,80}|(?<=['\"])-[A-Za-z])"
    r"([ \t]{1,8}|[\"']\s{0,4},\s{0,4}(?=[\"']))"
    r"(?:\"([^\"\r\n]{1,4096})\"|'([^'\r\n]{1,4096})'|([^\s\"']{1,4096}))"
)
# Credentials in URLs: user:password@, :password@ (redis), and a token as the user of an http(s)
# URL (https://TOKEN@github.com/). The scheme starts a run (no quadratic rescan), every part is
# capped.
_URL_CREDS = re.compile(
    r"(?i)(?<![a-z0-9+.-])([a-z][a-z0-9+.-]{0,31}://)([^\s/@:?#]{0,256})"
    r"(?::([^\s@]{0,256}(?:@[^\s@/]{0,128}){0,2}?))?@(?=[a-z0-9\[][a-z0-9.\-\]:]{0,255}(?:[/?#\s'\")]|$))"
)
# user:password@host without a scheme (a HOST given as an ssh spec)
_HOST_CREDS = re.compile(
    r"(?<![A-Za-z0-9_.:/@-])([A-Za-z_][A-Za-z0-9._-]{0,63}:)([^\s@/:]{1,256})"
    r"(@[A-Za-z0-9][A-Za-z0-9.-]{0,253})(?=[\s:,;)\]'\"]|$)"
)
# Azure SAS / S3 / GCS presigned query parameters (sig=, X-Amz-Signature=, X-Goog-Signature=,
# X-Amz-Security-Token=): caught by _LABELLED through their names.

# Longer lines are cut before redaction (at a word boundary, so a secret is never half kept):
# a line of 200 KB tells a reader nothing its first 16 KB does not.
MAX_LINE_CHARS = 16384
# a key or certificate body line: base64 of PEM width, mixed case and digits (a 64-character
# hex digest or container id is all lowercase, and kept)
_BASE64_LINE = re.compile(r"^\s*(?=[^\n]*[A-Z])(?=[^\n]*[a-z])(?=[^\n]*\d)[A-Za-z0-9+/]{60,80}={0,2}\s*$")
_PEM_BEGIN = re.compile(r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----")
_PEM_END = re.compile(r"-----END [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----")


def is_secret_flag(flag: str) -> bool:
    """True for ``--api-key``-like flags; ``--tokenizer`` and ``--max-num-batched-tokens`` name
    no secret (their values are model names and counts a report needs)."""
    low = flag.lower()
    if "tokenizer" in low or low.endswith(("tokens", "-token-id", "_token_id")):
        return False
    return bool(_SECRET_FLAG.match(flag))


def is_secret_key(key: str) -> bool:
    """True when an environment variable or config key name looks like it holds a secret."""
    if key.upper() in _SAFE_KEYS:
        return False
    return bool(_SECRET_KEY.search(key))


def cut_line(line: str, limit: int) -> str:
    """``line`` cut to about ``limit`` characters, never inside a word: a token cut in two
    would be too short for its pattern and half of it would be kept."""
    if len(line) <= limit:
        return line
    head = line[:limit]
    space = max(head.rfind(" "), head.rfind("\t"))
    if space >= limit - 512:
        head = head[:space]  # drop the word the cut went through: it may be half a token
    else:
        head = head[: max(0, limit - 512)]
    return head + " [... %d characters cut]" % (len(line) - len(head))


def cap_lines(text: str, limit: int = MAX_LINE_CHARS) -> str:
    """``text`` with every line longer than ``limit`` cut (see MAX_LINE_CHARS)."""
    if len(text) <= limit:
        return text
    return "\n".join(cut_line(ln, limit) for ln in text.split("\n"))


def _mask_url(m: Any) -> str:
    scheme, user, password = m.group(1), m.group(2), m.group(3)
    if password is not None:
        if password == MASK:
            return m.group(0)
        return scheme + user + ":" + MASK + "@"
    if scheme.lower() in ("http://", "https://") and user and user != MASK:
        return scheme + MASK + "@"
    return m.group(0)


def _mask_labelled(m: Any) -> str:
    value = m.group(3) or m.group(4) or m.group(5) or ""
    if _HARMLESS_VALUE.match(value) or MASK in value:
        return m.group(0)
    if m.group(5) and len(value) <= 3 and value.isalpha():
        return m.group(0)  # prose ("the user and key: ssh -i ..."), not a credential
    if value[:1] in ("[", "{") or value.lower() in ("bearer", "basic", "token"):
        return m.group(0)
    if re.match(r"(?i)(?:bearer|basic|token)\s", value):
        return m.group(0)  # the scheme is kept, _SCHEME hides what follows it
    learn(value)
    return _replace_value(m, value)


def _replace_value(m: Any, value: str) -> str:
    """The match with only ``value`` masked (quotes and escapes around it kept as they were)."""
    full = m.group(0)
    i = full.rfind(value)
    return full[:i] + MASK + full[i + len(value):]


def _mask_flag(m: Any) -> str:
    value = m.group(3) or m.group(4) or m.group(5) or ""
    if not is_secret_flag(m.group(1)) or value.startswith("-") or MASK in value:
        return m.group(0)
    if m.group(2).strip() and m.group(1).startswith("-") and len(m.group(1)) == 2:
        pass  # ['-p', 'x']: a list's repr
    elif len(m.group(1)) == 2:
        return m.group(0)  # "-p 8000" in free text is a port as often as a password
    learn(value)
    return _replace_value(m, value)


def redact_text(text: str) -> str:
    """Mask every secret-shaped value in free text (a log line, a repr, a command line).

    Lines longer than MAX_LINE_CHARS are cut first; the work is linear in the text's length."""
    if not text:
        return text
    out = cap_lines(text)
    # Each pattern runs only where its literal part occurs (a substring test in C): a line
    # with none of them costs one pass per needle instead of a regex attempt at every
    # character (64 MB of ":@" lines took 131 s in analyze).
    low = out.lower()

    def has(*needles: str) -> bool:
        return any(n in low for n in needles)

    if "://" in low:
        out = _URL_CREDS.sub(_mask_url, out)
    for pat, needles in zip(_VALUE_PATTERNS, _VALUE_NEEDLES):
        if has(*needles):
            out = pat.sub(MASK, out)
    if "cookie" in low:
        out = _COOKIE.sub(lambda m: m.group(1) + MASK if MASK not in m.group(2)[:12] else m.group(0), out)
    if has("bearer", "basic", "token"):
        out = _SCHEME.sub(lambda m: m.group(1) + MASK if m.group(2) != MASK else m.group(0), out)
    if "@" in low and ":" in low:
        out = _HOST_CREDS.sub(lambda m: m.group(0) if m.group(2) == MASK else
                              m.group(1) + MASK + m.group(3), out)
    if "digest" in low:
        out = _DIGEST.sub(lambda m: m.group(1) + MASK, out)
    if has(*_WORD_NEEDLES):
        out = _LABELLED_SEQ.sub(_mask_seq, out)
        out = _LABELLED.sub(_mask_labelled, out)
        out = _CAMEL.sub(_mask_labelled, out)
        out = _NETRC.sub(_mask_plain, out)
    if "-u" in low:
        out = _CURL_USER.sub(_mask_plain3, out)
    if "sshpass" in low:
        out = _SSHPASS.sub(_mask_plain, out)
    if has("mysql", "mariadb", "sshpass", "psql"):
        out = _GLUED_P.sub(_mask_plain, out)
    if "api-key" in low:
        out = _API_KEYS.sub(_mask_api_keys, out)
    if "-" in low:
        out = _FLAG_IN_TEXT.sub(_mask_flag, out)
    return scrub_known(out)


def _mask_seq(m: Any) -> str:
    return m.group(1) + m.group(2) + _QUOTED.sub(lambda q: _learn_quoted(q.group(0)), m.group(3))


def _learn_quoted(q: str) -> str:
    inner = q[1:-1]
    if MASK in inner or _HARMLESS_VALUE.match(inner):
        return q
    learn(inner)
    return q[0] + MASK + q[-1]


def _mask_plain(m: Any) -> str:
    value = m.group(2)
    if MASK in value or _HARMLESS_VALUE.match(value):
        return m.group(0)
    learn(value)
    return m.group(1) + MASK


def _mask_plain3(m: Any) -> str:
    if MASK in m.group(3):
        return m.group(0)
    learn(m.group(3))
    return m.group(1) + m.group(2) + MASK


def _mask_api_keys(m: Any) -> str:
    words = re.split(r"([ \t]+)", m.group(2))
    out = []
    for w in words:
        if w.strip() and MASK not in w:
            learn(w)
            out.append(MASK)
        else:
            out.append(w)
    return m.group(1) + "".join(out)


# Secret values met once (a masked flag's value, our own --api-key) are scrubbed wherever they
# recur: a key printed once as --api-key K is still K in a log line that names it bare.
_KNOWN = set()  # type: set
_KNOWN_RE = [None]  # type: List[Any]
MIN_KNOWN_LEN = 8  # shorter values are too likely to be ordinary words and numbers


def learn(value: str, always: bool = False) -> None:
    """Remember a secret value, so that every later redaction scrubs it wherever it recurs.

    Only values shaped like a credential are remembered (letters and digits mixed, or 16
    characters and more, no spaces): ``session=interactive`` must not blank out the word
    "interactive" in every report. ``always``: our own --api-key, remembered as it is."""
    value = (value or "").strip().strip("'\"")
    if len(value) < MIN_KNOWN_LEN or len(value) > 4096 or MASK in value or value in _KNOWN:
        return
    if _HARMLESS_VALUE.match(value) or value.isdigit():
        return
    shaped = " " not in value and (
        len(value) >= 16 or (any(c.isdigit() for c in value) and any(c.isalpha() for c in value)))
    if not (always or shaped):
        return
    _KNOWN.add(value)
    _KNOWN_RE[0] = re.compile("|".join(re.escape(v) for v in sorted(_KNOWN, key=len, reverse=True)))


def forget_known() -> None:
    """Forget every learnt value (tests; one process diagnosing one target needs no forgetting)."""
    _KNOWN.clear()
    _KNOWN_RE[0] = None


def scrub_known(text: str) -> str:
    """``text`` with every secret value met so far (``learn``) masked."""
    pat = _KNOWN_RE[0]
    if pat is None or not text:
        return text
    return pat.sub(MASK, text)


def redact_lines(lines: List[str]) -> List[str]:
    """``redact_text`` for consecutive lines (a log tail), carrying "inside a private key block"
    from one line to the next: a PEM key logged over 27 lines keeps none of its body."""
    out = []  # type: List[str]
    seen = {}  # type: Dict[str, str]
    in_key = False
    for line in lines:
        if not isinstance(line, str):
            out.append(line)
            continue
        if in_key:
            if _PEM_END.search(line):
                in_key = False
                out.append(MASK + redact_text(line[_PEM_END.search(line).end():]))
            else:
                out.append(MASK)
            continue
        begin = _PEM_BEGIN.search(line)
        if begin and not _PEM_END.search(line, begin.end()):
            in_key = True
            out.append(redact_text(line[: begin.start()]) + MASK)
            continue
        if _BASE64_LINE.match(line):
            out.append(MASK)  # a key or certificate body line whose BEGIN is not in the tail
            continue
        done = seen.get(line)
        if done is None:
            done = redact_text(line)
            if len(seen) < 100000:
                seen[line] = done  # a log repeats its lines: each is redacted once
        out.append(done)
    return out


def redact_env(env: Dict[str, str]) -> Dict[str, str]:
    """Mask values of secret-looking keys, and secret-shaped values under any key."""
    out = {}
    for key, value in env.items():
        if is_secret_key(key):
            learn(value)
            out[key] = MASK if value else value
        else:
            out[key] = redact_text(value)
    return out


def redact_argv(argv: List[str]) -> List[str]:
    """Mask secret flag values (``--api-key X``, ``--hf-token=X``, every value of ``--api-key
    K1 K2``), ``-u user:pass``, ``sshpass -p X``, ``-pPASS``, and secret-shaped values."""
    out = []  # type: List[str]
    hide_next = 0  # how many following values are secret (many: up to the next flag)
    user_next = False
    prog = str(argv[0]).rsplit("/", 1)[-1] if argv else ""
    glued_p = prog == "sshpass" or prog.startswith(("mysql", "mariadb"))
    for arg in argv:
        if not isinstance(arg, str):
            out.append(arg)
            continue
        if hide_next and not (arg.startswith("-") and len(arg) > 1 and out):
            learn(arg)
            out.append(MASK)
            hide_next -= 1
            continue
        hide_next = 0
        if user_next:
            user_next = False
            name, sep, pw = arg.partition(":")
            if sep and pw:
                learn(pw)
                out.append(name + ":" + MASK)
                continue
        if arg.startswith("-") and "=" in arg:
            flag, _, value = arg.partition("=")
            if is_secret_flag(flag):
                learn(value)
                out.append(flag + "=" + MASK)
                continue
            if flag in ("-u", "--user", "--proxy-user") and ":" in value:
                learn(value.partition(":")[2])
                out.append(flag + "=" + value.partition(":")[0] + ":" + MASK)
                continue
        elif is_secret_flag(arg):
            out.append(arg)
            # vLLM's --api-key takes several keys
            hide_next = 64 if "api-key" in arg.lower() or "api_key" in arg.lower() else 1
            continue
        elif arg in ("-u", "--user", "--proxy-user"):
            user_next = True
        elif glued_p and arg.startswith("-p") and len(arg) > 2 and not arg.startswith("-p-"):
            learn(arg[2:])
            out.append("-p" + MASK)  # mysql -pPASS, sshpass -pPASS
            continue
        out.append(redact_text(arg))
    return out


def redact_obj(obj: Any, key: Optional[str] = None) -> Any:
    """Walk JSON-like data and redact every string; dict keys that look secret mask their value."""
    if isinstance(obj, str):
        if key is not None and is_secret_key(key):
            learn(obj)
            return MASK if obj else obj
        return redact_text(obj)
    if isinstance(obj, dict):
        return {k: redact_obj(v, k if isinstance(k, str) else None) for k, v in obj.items()}
    if isinstance(obj, list):
        if obj and all(isinstance(x, str) for x in obj):
            if key in ("cmdline", "argv"):
                return redact_argv(obj)
            return redact_lines(obj)  # lines of a log: a key block may span several
        return [redact_obj(v) for v in obj]
    return obj


def redact_deep(obj: Any) -> Any:
    """Every string inside ``obj`` (dicts and lists changed in place) through redact_text,
    which also scrubs the values learnt so far. Repeated strings are redacted once."""
    memo = {}  # type: Dict[str, str]

    def one(s: str) -> str:
        if len(s) < 6:
            return s
        got = memo.get(s)
        if got is None:
            got = redact_text(s)
            if len(memo) < 200000:
                memo[s] = got
        return got

    stack = [obj]
    while stack:
        cur = stack.pop()
        if isinstance(cur, dict):
            for k, v in cur.items():
                if isinstance(v, str):
                    cur[k] = one(v)
                elif isinstance(v, (dict, list)):
                    stack.append(v)
        elif isinstance(cur, list):
            for i, v in enumerate(cur):
                if isinstance(v, str):
                    cur[i] = one(v)
                elif isinstance(v, (dict, list)):
                    stack.append(v)
    return obj


# The forms redaction is specified by: (name, a line that carries the secret, the secret).
# tests/test_redaction_forms.py plants every one in every input channel and searches every
# output for the secret; a new form is a new row here.
FORMS = [
    ("env-assign", "OPENAI_API_KEY=FormEnvAssign01", "FormEnvAssign01"),
    ("hf-token", "token hf_FormHfTokenAbcdefghijkl02", "hf_FormHfTokenAbcdefghijkl02"),
    ("sk-key", "key sk-FormSkKeyAbcdefghijkl03", "sk-FormSkKeyAbcdefghijkl03"),
    ("bearer", "Authorization: Bearer FormBearerValue04", "FormBearerValue04"),
    ("url-password", "postgres://app:FormUrlPass05@db.internal:5432/x", "FormUrlPass05"),
    ("json-label", '{"refresh_token": "FormJsonTok06", "n": 1}', "FormJsonTok06"),
    ("flag-in-text", "serve m --api-key FormFlagText07 --port 8000", "FormFlagText07"),
    ("cookie", "Cookie: session=FormCookie08; theme=dark", "FormCookie08"),
    ("pem", "-----BEGIN RSA PRIVATE KEY-----MIIFormPemBody09-----END RSA PRIVATE KEY-----",
     "MIIFormPemBody09"),
    # round 2
    ("vllm-non-default-args",
     "INFO non-default args: {'model': 'm', 'api_key': ['FormVllmArgs10']}", "FormVllmArgs10"),
    ("api-key-second-value", "serve m --api-key FormKeyOne11 FormKeyTwo11 --port 8000",
     "FormKeyTwo11"),
    ("camel-accessToken", "config accessToken=FormCamelTok12 ok", "FormCamelTok12"),
    ("camel-clientSecret", '{"clientSecret": "FormCamelSec13"}', "FormCamelSec13"),
    ("camel-dbPassword", "dbPassword: FormCamelPw14", "FormCamelPw14"),
    ("glued-PGPASSWORD", "PGPASSWORD=FormGluedPg15 psql -h db", "FormGluedPg15"),
    ("glued-APITOKEN", "APITOKEN=FormGluedTok16", "FormGluedTok16"),
    ("value-after-tab", "api_key:\tFormTabValue17", "FormTabValue17"),
    ("label-tab-value", "password\tFormLabelTab18", "FormLabelTab18"),
    ("netrc", "machine h login u password FormNetrc19", "FormNetrc19"),
    ("pass=", "redis pass=FormPassEq20 db=0", "FormPassEq20"),
    ("--pass", "tool --pass FormPassFlag21 --v", "FormPassFlag21"),
    ("--passphrase", "gpg --passphrase FormPassphrase22 -d", "FormPassphrase22"),
    ("-pPASS", "mysql -u root -pFormMysqlP23 db", "FormMysqlP23"),
    ("curl-u", "curl -u admin:FormCurlUser24 https://h/", "FormCurlUser24"),
    ("sshpass", "sshpass -p FormSshpass25 ssh h", "FormSshpass25"),
    ("unquoted-semicolon", "password=FormSemi26a;FormSemi26b rest", "FormSemi26b"),
    ("unquoted-comma", "token=FormComma27a,FormComma27b next", "FormComma27b"),
    ("json-escaped-quote", '{"password": "FormEsc28a\\"FormEsc28b"}', "FormEsc28b"),
    ("url-password-slash", "mongodb://u:FormUrl29a/FormUrl29b@h.example:27017/db", "FormUrl29b"),
    ("url-password-at", "redis://u:FormUrl30a@FormUrl30b@cache.local:6379", "FormUrl30a"),
    ("digest", 'Authorization: Digest username="u", response="FormDigest31resp"',
     "FormDigest31resp"),
    ("pgp", "-----BEGIN PGP PRIVATE KEY BLOCK-----lQFormPgpBody32-----END PGP PRIVATE KEY BLOCK-----",
     "lQFormPgpBody32"),
    ("env-DB_PASS", "DB_PASS=FormDbPass33", "FormDbPass33"),
    ("env-REDIS_PASS", "REDIS_PASS=FormRedisPass34", "FormRedisPass34"),
    ("env-SSHPASS", "SSHPASS=FormSshpassEnv35", "FormSshpassEnv35"),
    ("env-PASSPHRASE", "PASSPHRASE=FormPassphraseEnv36", "FormPassphraseEnv36"),
    ("tuple-credentials", "auth=('admin', 'FormTupleCred37')", "FormTupleCred37"),
    ("camel-dict-key", "{'apiKey': 'FormCamelDict38'}", "FormCamelDict38"),
    ("host-spec-password", "admin:FormHostSpec40@gpu-node-3: connection refused", "FormHostSpec40"),
    ("query-access-token", "GET https://h/x?access_token=FormQueryTok39&a=1", "FormQueryTok39"),
]
