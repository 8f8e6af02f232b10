"""The redaction corpus: every secret form the red-team review planted (issue 15, F1-F3, F17)
and the ones covered before it (issue 8), as (name, planted text, the secret in it).

Shared by tests/faults/corpus_target.py (which plants them in its environment, argv, locals,
log and HTTP body) and tests/test_redaction_corpus.py (which looks for them in every output).
"""

from __future__ import annotations

JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJjb3JwdXMtdGVzdCJ9."
    "Y29ycHVzU2lnbmF0dXJlVmFsdWUxMjM"
)

# Free text: a log line, a local's repr, an env value of a harmless name, an HTTP body line.
FREE_TEXT = [
    ("openai env line", "export OPENAI_API_KEY=CpOpenaiPlain01x", "CpOpenaiPlain01x"),
    (
        "aws secret env line",
        "AWS_SECRET_ACCESS_KEY=CpAwsSecretKey02xYzAbCdEf",
        "CpAwsSecretKey02xYzAbCdEf",
    ),
    ("hf hub token env line", "HUGGING_FACE_HUB_TOKEN=CpHubToken03xyz", "CpHubToken03xyz"),
    ("client_secret", "grant client_secret=CpClientSecret04 ok", "CpClientSecret04"),
    ("json refresh_token", '{"refresh_token": "CpRefreshTok05", "ttl": 1}', "CpRefreshTok05"),
    (
        "Namespace repr",
        "Namespace(model='m', openai_api_key='CpNamespace06', port=8000)",
        "CpNamespace06",
    ),
    (
        "--api-key in a line",
        "launch: serve m --api-key CpFlagInLine07 --port 8000",
        "CpFlagInLine07",
    ),
    ("Cookie header", "Cookie: session=CpCookieSess08; theme=dark", "CpCookieSess08"),
    ("Set-Cookie header", "Set-Cookie: sid=CpSetCookie09; Path=/", "CpSetCookie09"),
    ("redis password", "redis://:CpRedisPass10@cache:6379/0", "CpRedisPass10"),
    ("token as URL user", "https://CpUrlUserTok11@github.com/o/r.git", "CpUrlUserTok11"),
    (
        "azure sas sig",
        "https://a.blob.core.windows.net/c/b?sv=1&sig=CpSasSig12%2B&se=1",
        "CpSasSig12",
    ),
    (
        "X-Amz-Signature",
        "https://b.s3/k?X-Amz-Signature=cpamzsig13abcdef&X-Amz-Date=1",
        "cpamzsig13abcdef",
    ),
    ("X-Goog-Signature", "https://storage/k?X-Goog-Signature=cpgoogsig14abcd", "cpgoogsig14abcd"),
    (
        "slack webhook",
        "https://hooks.slack.com/services/T0CPAAAA/B0CPBBBB/CpSlackHook15xyz",
        "CpSlackHook15xyz",
    ),
    ("stripe sk_live_", "key sk_live_CpStripeLive16abcd", "sk_live_CpStripeLive16abcd"),
    ("google ya29.", "oauth ya29.CpGoogleOauth17abcdefghij", "ya29.CpGoogleOauth17abcdefghij"),
    ("npm_", "npm_CpNpmTokenAbcdefghijklmnopqrstuv18", "npm_CpNpmTokenAbcdefghijklmnopqrstuv18"),
    (
        "pypi-",
        "pypi-AgEIcHlwaS5vcmcCpPypiTokenAbcdefghijklmnopqrstuvwxyz19",
        "CpPypiTokenAbcdefghijklmnopqrstuvwxyz19",
    ),
    (
        "databricks dapi",
        "dapi00112233445566778899aabbccddeeff",
        "dapi00112233445566778899aabbccddeeff",
    ),
    # covered before issue 15
    ("hf_ token", "logged in with hf_CpHfToken20AbCdEfGhIjKlMn", "hf_CpHfToken20AbCdEfGhIjKlMn"),
    (
        "sk-proj key",
        "key sk-proj-CpOpenAiKey21Q8xT2mZr7LwVb3",
        "sk-proj-CpOpenAiKey21Q8xT2mZr7LwVb3",
    ),
    ("AWS key id", "id AKIACP22EXAMPLEZ7K4M", "AKIACP22EXAMPLEZ7K4M"),
    (
        "github token",
        "ghp_CpGithub23AbcdefghijklmnopqrstuvWx12",
        "ghp_CpGithub23AbcdefghijklmnopqrstuvWx12",
    ),
    ("JWT", "jwt " + JWT, JWT.split(".")[2]),
    ("Bearer header", "Authorization: Bearer CpBearer24Tok3nQx7Zp2", "CpBearer24Tok3nQx7Zp2"),
    ("URL password", "postgres://dbuser:CpDbPassw0rd25@db:5432/app", "CpDbPassw0rd25"),
    ("password=", "password=CpPassword26Horse", "CpPassword26Horse"),
    ("gitlab token", "glpat-CpGitlab27AbcdefghijKLM", "glpat-CpGitlab27AbcdefghijKLM"),
    ("slack bot token", "xoxb-1234567890-CpSlackBot28abc", "CpSlackBot28abc"),
    (
        "google api key",
        "AIzaCpGoogleApiKey29AbCdEfGhIjKlMnOpQrSt",
        "AIzaCpGoogleApiKey29AbCdEfGhIjKlMnOpQrSt",
    ),
]

PEM_BODY = [
    "MIIEowIBAAKCAQEACpPemBodyLineOneAbCdEfGhIjKlMnOpQrStUvWxYz01234567",
    "CpPemBodyLineTwoAbCdEfGhIjKlMnOpQrStUvWxYz0123456789abcdefghijklmn",
    "CpPemLastLine==",
]
PEM_LINES = ["-----BEGIN RSA PRIVATE KEY-----", *PEM_BODY, "-----END RSA PRIVATE KEY-----"]

# argv flags whose next argument is secret (F17 and before)
ARGV = [
    ("--openai-key", "CpArgOpenai30x"),
    ("--hf-key", "CpArgHfKey31x"),
    ("--key", "CpArgKey32x"),
    ("--signing-key", "CpArgSigning33x"),
    ("--jwt", "CpArgJwt34x"),
    ("--bearer", "CpArgBearer35x"),
    ("--session", "CpArgSession36x"),
    ("-p", "CpArgMysqlP37x"),
    ("--api-key", "CpArgApiKey38x"),
    ("--hf-token", "CpArgHfToken39x"),
    ("--password", "CpArgPassword40x"),
]

# environment variables whose *name* says secret (the value is plain)
ENV_BY_NAME = {
    "OPENAI_API_KEY": "CpEnvOpenai41x",
    "HF_TOKEN": "CpEnvHfToken42x",
    "AWS_SECRET_ACCESS_KEY": "CpEnvAwsSecret43x",
    "MY_PASSWORD": "CpEnvPassword44x",
    "HUGGING_FACE_HUB_TOKEN": "CpEnvHubToken45x",
    "DB_PWD": "CpEnvDbPwd46x",
}

# A header dict among the locals of the waiting frame: values under secret-looking keys
LOCAL_HEADERS = {"Authorization": "CpLocalBearer47Tok3n", "Cookie": "CpLocalCookie48"}

# What the HTTP endpoint answers (the probe keeps 200 characters of it)
HTTP_BODY_FORMS = [3, 7, 21]  # indexes into FREE_TEXT


def secrets() -> dict[str, str]:
    """name -> the secret text that must appear in no output."""
    out = {f"text: {name}": secret for name, _text, secret in FREE_TEXT}
    out.update({f"pem body {i}": body[3:40] for i, body in enumerate(PEM_BODY)})
    out.update({f"argv {flag}": value for flag, value in ARGV})
    out.update({f"env {key}": value for key, value in ENV_BY_NAME.items()})
    out.update({f"local header {k}": v for k, v in LOCAL_HEADERS.items()})
    return out
