"""Redaction of secrets, applied before anything is written.

Stdlib only and Python 3.8 compatible: this module travels with the probe to remote hosts.

Secrets are recognised two ways, because collectors that redact by key name alone leak:
- by **key**: environment variables and ``--flag value`` arguments whose name looks secret
  (``*TOKEN*``, ``*KEY*``, ``*SECRET*``, ``*PASSWORD*``, ``*CREDENTIAL*``, cloud credentials);
- by **value**: strings shaped like a secret wherever they appear (HF tokens ``hf_...``,
  ``sk-...`` keys, AWS key ids, bearer tokens, ``user:pass@`` in URLs, JWT-looking strings,
  private key blocks), in command lines, log lines, py-spy locals and free text.
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
    r"^AWS_|^AZURE_CLIENT|^GOOGLE_APPLICATION_CREDENTIALS$|^GCP_|^WANDB_API|^HF_HUB_TOKEN$)",
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
    r"private[-_]?key|credential|auth|cookie)[A-Za-z0-9_.-]*$",
    re.IGNORECASE,
)

_VALUE_PATTERNS = [
    # Hugging Face tokens
    re.compile(r"\bhf_[A-Za-z0-9]{20,}\b"),
    # OpenAI-style / generic sk- keys (sk-..., sk-proj-...)
    re.compile(r"\bsk-(?:[A-Za-z0-9_-]{2,}-)?[A-Za-z0-9_-]{16,}"),
    # AWS access key ids and secrets following them
    re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{16}\b"),
    # GitHub / GitLab / Slack tokens
    re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})\b"),
    re.compile(r"\bglpat-[A-Za-z0-9_-]{20,}\b"),
    re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}\b"),
    # Google API keys
    re.compile(r"\bAIza[0-9A-Za-z_-]{35}\b"),
    # JWT-looking strings: three base64url parts, the first two starting with eyJ
    re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),
    # PEM private key blocks (also when squeezed onto one line)
    re.compile(
        r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)",
        re.DOTALL,
    ),
]
# "Bearer xyz" / "Basic xyz": keep the scheme, hide the credential.
_SCHEME = re.compile(r"(?i)(\b(?:bearer|basic|token)\s+)([A-Za-z0-9._~+/=:-]{6,})")
# "Authorization: xyz" / "token=xyz" style: keep the label, hide the value (a scheme word after
# the label is left for _SCHEME, so "Authorization: Bearer xyz" hides xyz, not "Bearer").
_LABELLED = re.compile(
    r"(?i)(\b(?:authorization|x-api-key|api[-_]?key|apikey|access[-_]?token|"
    r"auth[-_]?token|hf[-_]?token|token|secret|password|passwd|pwd)\b[\"']?\s*[:=]\s*[\"']?)"
    r"(?!(?:bearer|basic|token)\s|\[REDACTED\])"
    r"([^\s\"',;&)}\]]{4,})"
)
# user:password@ in URLs
_URL_CREDS = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^\s/:@]+):([^\s/@]+)@")


def is_secret_key(key: str) -> bool:
    """True when an environment variable or config key name looks like it holds a secret."""
    if key.upper() in _SAFE_KEYS:
        return False
    return bool(_SECRET_KEY.search(key))


def redact_text(text: str) -> str:
    """Mask every secret-shaped value in free text (a log line, a repr, a command line)."""
    if not text:
        return text
    out = _URL_CREDS.sub(lambda m: m.group(1) + ":" + MASK + "@", text)
    for pat in _VALUE_PATTERNS:
        out = pat.sub(MASK, out)
    out = _SCHEME.sub(lambda m: m.group(1) + MASK if m.group(2) != MASK else m.group(0), out)
    out = _LABELLED.sub(lambda m: m.group(1) + MASK if m.group(2) != MASK else m.group(0), out)
    return out


def redact_env(env: Dict[str, str]) -> Dict[str, str]:
    """Mask values of secret-looking keys, and secret-shaped values under any key."""
    out = {}
    for key, value in env.items():
        if is_secret_key(key):
            out[key] = MASK if value else value
        else:
            out[key] = redact_text(value)
    return out


def redact_argv(argv: List[str]) -> List[str]:
    """Mask secret flag values (``--api-key X``, ``--hf-token=X``) and secret-shaped values."""
    out = []  # type: List[str]
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append(MASK)
            hide_next = False
            continue
        if arg.startswith("-") and "=" in arg:
            flag, _, _value = arg.partition("=")
            if _SECRET_FLAG.match(flag):
                out.append(flag + "=" + MASK)
                continue
        elif _SECRET_FLAG.match(arg):
            out.append(arg)
            hide_next = True
            continue
        out.append(redact_text(arg))
    return out


def redact_obj(obj: Any, key: Optional[str] = None) -> Any:
    """Walk JSON-like data and redact every string; dict keys that look secret mask their value."""
    if isinstance(obj, str):
        if key is not None and is_secret_key(key):
            return MASK if obj else obj
        return redact_text(obj)
    if isinstance(obj, dict):
        return {k: redact_obj(v, k if isinstance(k, str) else None) for k, v in obj.items()}
    if isinstance(obj, list):
        if obj and all(isinstance(x, str) for x in obj) and key in ("cmdline", "argv"):
            return redact_argv(obj)
        return [redact_obj(v) for v in obj]
    return obj
