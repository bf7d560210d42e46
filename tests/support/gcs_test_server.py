#!/usr/bin/python3
"""gcs_test_server: a Google Cloud Storage compatible HTTP server for tensorfs tests.

GCS is not reachable from the machines tensorfs is built and tested on, so every
integration test, the demo and the benchmarks talk to this server instead. It
serves a directory tree as GCS buckets over the JSON API subset that tensorfs
uses, issues OAuth2 tokens (service-account JWT, refresh token, GCE metadata),
and adds a control API (/_control/...) through which tests inject faults, read
counters and emulate a slow link. On the same port and data directory it also
speaks the S3 REST dialect, verifying SigV4 signatures, with the STS,
instance-metadata and container-credentials endpoints of the AWS credential
chain: see s3_dialect.py (its flags are listed there and by --help). Faults,
link emulation and counters apply to both dialects. Standard library only; runs
on /usr/bin/python3 (3.11).

USAGE

  /usr/bin/python3 tests/support/gcs_test_server.py --data DIR [options]

  --data DIR                  Each immediate subdirectory of DIR is a bucket; every
                              regular file below it (symlinks followed) is an object
                              named by its '/'-separated relative path. Entries whose
                              name starts with '.' directly under DIR, files left at
                              the top level of DIR and upload temporaries
                              (".gcs_test_server.tmp.*") are not served.
  --host HOST                 Address to bind (default 127.0.0.1).
  --port PORT                 Port to bind; 0 (default) picks a free port.
  --port-file FILE            Once listening, write the bound port number (decimal, no
                              newline) to FILE atomically (FILE.tmp, then rename).
  --latency-ms MS             Link emulation: delay before the first byte of every
                              storage response (default 0).
  --conn-rate BYTES_PER_S     Link emulation: rate cap per connection (0 = none).
  --total-rate BYTES_PER_S    Link emulation: rate cap shared by all connections (0 = none).
  --tls-cert FILE, --tls-key FILE
                              Also speak TLS on the same port: a connection whose first
                              byte is a TLS handshake record is served over TLS with this
                              PEM certificate (chain) and key; any other connection, the
                              control API included, stays plain HTTP. Clients use
                              https://HOST:PORT with a CA that trusts FILE. Over TLS,
                              media bodies go out through the TLS socket in 1 MiB reads
                              (os.preadv) instead of os.sendfile.
  --require-auth              Storage requests need "Authorization: Bearer T" with T a
                              token this server issued and that has not expired.
  --token-public-key FILE     Key that service-account JWT assertions must verify
                              against (RS256). FILE may hold a "PUBLIC KEY", "RSA PUBLIC
                              KEY", "PRIVATE KEY" or "RSA PRIVATE KEY" PEM, a
                              "CERTIFICATE", or a service-account JSON key file (its
                              "private_key" is used). Unencrypted keys only. Repeatable:
                              an assertion verifying against any of them is accepted.
  --token-lifetime SECONDS    expires_in of issued tokens (default 3600).
  --refresh-client-id ID, --refresh-client-secret S, --refresh-token T
                              The one authorized_user triple the refresh_token grant
                              accepts (all three or none).
  --precompute-hashes         Compute md5Hash/crc32c of every object before listening,
                              so that the first listing does not pay for it.
  --quiet                     Do not log one line per request (errors are still logged).

  With --port 0 and no --port-file the port is printed on stdout as
  "listening on http://HOST:PORT". SIGTERM or SIGINT stops the server.

OBJECTS

  generation      The file's st_mtime_ns (at least 1): stable across restarts, changes
                  when the file is rewritten. No old generations are kept.
  metageneration  Always "1".
  md5Hash, crc32c Base64 of the MD5 digest and of the big-endian CRC32C (Castagnoli),
                  computed on first need and cached per (file, generation, size), in
                  memory and, where the file system allows, in the extended attribute
                  "user.gcs_test_server.hashes" so that a restart does not recompute
                  them. CRC32C uses libext2fs's ext2fs_crc32c_le (libext2fs2 comes with
                  e2fsprogs, which every Debian system has) through ctypes, ~1.4 GB/s;
                  without it, a table-driven Python loop, ~10 MB/s.
  contentType     application/json for *.json, text/plain for *.txt, else
                  application/octet-stream (uploads do not record a content type).

STORAGE ENDPOINTS (JSON API; object names in paths are percent-encoded, '/' as %2F;
an unencoded '/' is accepted too)

  GET  /storage/v1/b/BUCKET                        bucket resource (storage#bucket)
  GET  /storage/v1/b/BUCKET/o                      list objects
       prefix, delimiter, maxResults (default and max 1000; <1 means 1000),
       pageToken, startOffset, endOffset. Items and rolled-up prefixes are paged
       together in name order; nextPageToken (urlsafe base64 of the last name
       returned) appears only when more remain. As on GCS, "items" and "prefixes"
       are omitted when empty, and a prefix is reported only if an object lies
       under it. "fields" and "projection" are ignored (full resources are sent).
  GET  /storage/v1/b/BUCKET/o/OBJECT               object resource (storage#object)
  GET  /storage/v1/b/BUCKET/o/OBJECT?alt=media     media download
  GET  /download/storage/v1/b/BUCKET/o/OBJECT      media download (the mediaLink form)
  DELETE /storage/v1/b/BUCKET/o/OBJECT             204, no body
  POST /upload/storage/v1/b/BUCKET/o?uploadType=media&name=NAME
       Writes the body to a temporary file next to the target, gives it an mtime
       strictly greater than the replaced object's generation, and renames it into
       place. Returns the object resource. Names that cannot be files (empty
       segments, ".", "..", a trailing '/', NUL) get 400; a name whose parent path
       is an existing object gets 409. Only uploadType=media is supported.

  Preconditions on object GET/DELETE/upload: generation=G (404 unless G is the
  current generation; not for uploads), ifGenerationMatch=G (412 on mismatch; 0 means
  "must not exist"), ifGenerationNotMatch=G (304 for GET, 412 otherwise).

  Media downloads answer 200 with the whole object, or for "Range: bytes=A-B",
  "bytes=A-" or "bytes=-N" 206 with "Content-Range: bytes A-B/SIZE" (B clamped to
  SIZE-1); an unsatisfiable range (A >= SIZE, or -0) gets 416 with
  "Content-Range: bytes */SIZE". A malformed or multi-range header is ignored (200).
  Headers: x-goog-generation, x-goog-metageneration, x-goog-stored-content-length,
  ETag, Accept-Ranges. No x-goog-hash (the hashes may not be computed yet).
  Bytes are sent with os.sendfile from the opened file, so the generation in the
  headers is the one whose bytes are sent.

  Errors have a JSON body {"error": {"code": N, "message": "...", "errors": [...]}}.
  Every response carries a correct Content-Length (204 none); connections are
  HTTP/1.1 keep-alive.

AUTH ENDPOINTS

  POST /token        OAuth2 token endpoint, form-encoded body.
       grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer&assertion=JWT: the JWT
       must be RS256, verify against --token-public-key, and carry "iss", an "aud"
       that ends with "/token", numeric "iat" and "exp" with exp > now,
       iat <= now + 300 and 0 < exp - iat <= 3600.
       grant_type=refresh_token with client_id, client_secret, refresh_token equal
       to the --refresh-* values.
       Success: {"access_token": "tok-...", "expires_in": LIFETIME, "token_type":
       "Bearer"}. Failure: 400 {"error": "invalid_grant", "error_description": ...}
       (an unknown grant_type gets "unsupported_grant_type").
  GET  /computeMetadata/v1/instance/service-accounts/default/token   token JSON
  GET  /computeMetadata/v1/instance/service-accounts/default/email   "test@test-project.iam.gserviceaccount.com"
  GET  /computeMetadata/v1/project/project-id                        "test-project"
  GET  /computeMetadata/v1/ and /                                    200 (GCE detection probes)
       All need "Metadata-Flavor: Google" (else 403) and answer with that header.
       Clients find this server through GCE_METADATA_HOST=127.0.0.1:PORT.

  With --require-auth, storage requests without a valid token get 401 with a JSON
  error and "WWW-Authenticate: Bearer". /token, /computeMetadata and /_control never
  need a token. Without --require-auth any Authorization header (or none) is accepted.

CONTROL API (not GCS; never shaped, faulted or counted)

  GET    /_control/health          200 "ok"
  POST   /_control/faults          body: a JSON list of rules (or one rule); appends.
                                   Answers {"ok": true}, or 400 saying what is wrong.
  GET    /_control/faults          {"rules": [...]}: the rules with count remaining
  DELETE /_control/faults          removes all rules
  GET    /_control/stats           counters, see below
  POST   /_control/stats/reset     zeroes them
  GET    /_control/shaping         {"latency_ms": .., "conn_rate": .., "total_rate": ..}
  POST   /_control/shaping         sets any of those keys (others are kept); answers
                                   {"ok": true} plus the resulting settings
  POST   /_control/tokens/revoke   forgets every issued token (their holders get 401
                                   under --require-auth)

  Fault rule:
    {"match": {"method": "GET", "path_regex": "...", "media": true},
     "action": "...", <action parameters>, "count": K}
  Every match key is optional. method compares case-insensitively; path_regex is
  re.search'ed against the request target as sent (percent-encoded path plus
  "?query"); media true matches only media downloads, false only everything else.
  count: how many matching requests the rule applies to (default 1, -1 = forever).
  Rules are tried in the order they were added; a request uses the first matching
  rule with count remaining. Faults apply to storage, /token and /computeMetadata
  requests. Actions:
    "status"            "status": 503|429|500|408|401|403|404|412|... : answer with
                        that code and a JSON error body instead of the real response.
    "reset_after"       "bytes": N : send the real headers and the first N body bytes,
                        then reset the connection (SO_LINGER 0, the peer sees RST).
    "truncate_after"    "bytes": N : send the real headers (full Content-Length) and N
                        body bytes, then close the connection cleanly (FIN).
    "stall_after"       "bytes": N, "seconds": S [, "then": "continue"|"close"] : send
                        N body bytes, send nothing for S seconds, then send the rest
                        (default) or close the connection.
    "delay_first_byte"  "seconds": S : sleep S seconds before the status line, then
                        answer normally.

  Stats:
    requests            storage requests (JSON API, download and upload paths)
    media_requests      media downloads
    list_requests       object listings
    metadata_requests   object resource GETs (not alt=media)
    upload_requests, delete_requests
    token_requests      POST /token plus metadata-server token GETs
    gce_metadata_requests  every /computeMetadata request
    bytes_served        media body bytes actually written to sockets
    ranges              [[offset, length, object_name], ...] of the last 10000 media
                        responses that carried bytes (the range served, not the bytes
                        that made it out before a fault)
    auth_headers        storage requests by Authorization scheme: {"Bearer": N,
                        "none": N, ...}
    status_codes        {"200": N, "206": N, ...} over storage, token and metadata
                        responses
    faults_applied      how many requests a fault rule was applied to
    s3_signers          signed S3 storage requests that verified, by access key ID: {"AKIA...": N}
    s3_user_agents      S3 storage requests by User-Agent header
    sts_web_identity_tokens  STS AssumeRoleWithWebIdentity requests by the token they carried
    sts_issued          {access key ID: the web identity token it was issued for}
    requests_in_progress  requests other than the control API's being answered now,
                        whose counters may still change (not zeroed by a reset)

LINK EMULATION

  latency_ms is slept before the first byte of every storage response (listing,
  object resource, media, upload, delete). conn_rate paces the body bytes of each
  connection's storage responses with a per-connection token bucket; total_rate
  paces them with one bucket shared by all connections. Bodies go out in chunks of
  1/50 s at the lower rate, at most 256 KiB (20 ms at 100 Mbit/s), so the rate is
  smooth; larger chunks would be coarser, smaller ones cost the server CPU that a
  real link does not (on a small machine that CPU is taken from the client under
  test). With both rates 0, bodies are written at full speed.
"""

from __future__ import annotations

import argparse
import base64
import collections
import concurrent.futures
import ctypes
import ctypes.util
import datetime
import hashlib
import http.server
import json
import os
import re
import secrets
import socket
import ssl
import struct
import sys
import threading
import time
import traceback
import urllib.parse

import s3_dialect

TMP_PREFIX = ".gcs_test_server.tmp."
XATTR_HASHES = "user.gcs_test_server.hashes"
MAX_RESULTS = 1000
RANGES_KEPT = 10000
MAX_CHUNK = 256 * 1024
MIN_CHUNK = 1024
HASH_CHUNK = 8 * 1024 * 1024
PROJECT_ID = "test-project"
SERVICE_ACCOUNT_EMAIL = "test@test-project.iam.gserviceaccount.com"
# Route kinds that are storage requests (shaped, counted in "requests", need auth).
STORAGE_KINDS = ("bucket", "list", "object", "media", "delete", "upload", "storage",
                 "s3_list", "s3_object", "s3_media", "s3_bucket")
S3_KINDS = ("s3_list", "s3_object", "s3_media", "s3_bucket", "sts", "imds", "container")
MEDIA_KINDS = ("media", "s3_media")
CONNECTION_ERRORS = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, TimeoutError)


# --------------------------------------------------------------------------- CRC32C

class Crc32c:
    """CRC32C (Castagnoli, reflected polynomial 0x82F63B78) with extend semantics:
    extend(extend(0, a), b) == extend(0, a + b). Uses libext2fs's slice-by-8
    ext2fs_crc32c_le through ctypes when available, else a byte table in Python."""

    POLY = 0x82F63B78

    def __init__(self, allow_native: bool = True):
        self._table = []
        for i in range(256):
            c = i
            for _ in range(8):
                c = (c >> 1) ^ self.POLY if c & 1 else c >> 1
            self._table.append(c)
        self._native = self._load_native() if allow_native else None

    @staticmethod
    def _load_native():
        name = ctypes.util.find_library("ext2fs")
        if not name:
            return None
        try:
            fn = ctypes.CDLL(name).ext2fs_crc32c_le
        except (OSError, AttributeError):
            return None
        fn.restype = ctypes.c_uint32
        fn.argtypes = [ctypes.c_uint32, ctypes.c_void_p, ctypes.c_size_t]
        return fn

    @property
    def implementation(self) -> str:
        return "libext2fs" if self._native else "python"

    def extend(self, crc: int, data) -> int:
        if self._native is not None and len(data) > 0:
            buf = data if isinstance(data, bytearray) else bytearray(data)
            addr = ctypes.addressof((ctypes.c_char * len(buf)).from_buffer(buf))
            return self._native(crc ^ 0xFFFFFFFF, addr, len(data)) ^ 0xFFFFFFFF
        table = self._table
        crc ^= 0xFFFFFFFF
        for b in bytes(data):
            crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
        return crc ^ 0xFFFFFFFF


CRC32C = Crc32c()


class HashCache:
    """md5Hash and crc32c per (device, inode, generation, size), computed once.

    Thread-safe: concurrent requests for the same file wait for one computation."""

    def __init__(self):
        self._lock = threading.Lock()
        self._done: dict[tuple, tuple[str, str]] = {}
        self._pending: dict[tuple, threading.Lock] = {}

    def get(self, path: str, st: os.stat_result, source: str | None = None) -> tuple[str, str]:
        """The hashes of the file at `path` whose stat is `st`; `source` (a
        /proc/self/fd/N of that very file, opened) is read instead of `path` when
        given, so that a file replaced meanwhile is not hashed in its place."""
        key = (st.st_dev, st.st_ino, generation_of(st), st.st_size)
        path = source or path
        with self._lock:
            if key in self._done:
                return self._done[key]
            key_lock = self._pending.setdefault(key, threading.Lock())
        with key_lock:
            with self._lock:
                if key in self._done:
                    return self._done[key]
            result = self._load_xattr(path, key) or self._compute(path, key)
            with self._lock:
                self._done[key] = result
                self._pending.pop(key, None)
        return result

    @staticmethod
    def _load_xattr(path, key):
        try:
            fields = os.getxattr(path, XATTR_HASHES).decode().split()
        except (OSError, UnicodeDecodeError, AttributeError):
            return None
        if len(fields) == 4 and fields[0] == str(key[2]) and fields[1] == str(key[3]):
            return fields[2], fields[3]
        return None

    @staticmethod
    def _compute(path, key):
        md5 = hashlib.md5()
        crc = 0
        buf = bytearray(HASH_CHUNK)
        view = memoryview(buf)
        # MD5 and CRC32C of each chunk run in parallel (both release the GIL).
        with open(path, "rb", buffering=0) as f, concurrent.futures.ThreadPoolExecutor(1) as pool:
            while True:
                n = f.readinto(buf)
                if not n:
                    break
                crc_future = pool.submit(CRC32C.extend, crc, buf if n == len(buf) else buf[:n])
                md5.update(view[:n])
                crc = crc_future.result()
        result = (base64.b64encode(md5.digest()).decode(),
                  base64.b64encode(crc.to_bytes(4, "big")).decode())
        try:
            os.setxattr(path, XATTR_HASHES, f"{key[2]} {key[3]} {result[0]} {result[1]}".encode())
        except (OSError, AttributeError):
            pass  # best effort: read-only trees, file systems without user xattrs
        return result


# --------------------------------------------------------------------------- RS256

class KeyFormatError(ValueError):
    pass


def _der_next(buf: bytes, pos: int) -> tuple[int, int, int]:
    """Returns (tag, content_start, content_end) of the DER element at pos."""
    if pos + 2 > len(buf):
        raise KeyFormatError("truncated DER")
    tag = buf[pos]
    length = buf[pos + 1]
    pos += 2
    if length & 0x80:
        n = length & 0x7F
        if n == 0 or n > 4 or pos + n > len(buf):
            raise KeyFormatError("bad DER length")
        length = int.from_bytes(buf[pos:pos + n], "big")
        pos += n
    if pos + length > len(buf):
        raise KeyFormatError("truncated DER")
    return tag, pos, pos + length


def _der_children(buf: bytes, start: int, end: int) -> list[tuple[int, int, int]]:
    out = []
    pos = start
    while pos < end:
        tag, s, e = _der_next(buf, pos)
        out.append((tag, s, e))
        pos = e
    return out


RSA_OID = bytes.fromhex("2a864886f70d010101")


def _rsa_from_spki(der, s, e):
    alg, bits = _der_children(der, s, e)[:2]
    oid = _der_children(der, alg[1], alg[2])[0]
    if der[oid[1]:oid[2]] != RSA_OID:
        raise KeyFormatError("not an RSA key")
    if bits[0] != 0x03 or der[bits[1]] != 0:
        raise KeyFormatError("bad subjectPublicKey")
    return _rsa_from_pkcs1_public(der, bits[1] + 1, bits[2])


def _rsa_from_pkcs1_public(der, s, e):
    tag, cs, ce = _der_next(der, s)
    n, ex = _der_children(der, cs, ce)[:2]
    return int.from_bytes(der[n[1]:n[2]], "big"), int.from_bytes(der[ex[1]:ex[2]], "big")


def _rsa_from_pkcs1_private(der, s, e):
    tag, cs, ce = _der_next(der, s)
    parts = _der_children(der, cs, ce)
    n, ex = parts[1], parts[2]
    return int.from_bytes(der[n[1]:n[2]], "big"), int.from_bytes(der[ex[1]:ex[2]], "big")


def load_rsa_public_key(path: str) -> tuple[int, int]:
    """(modulus, exponent) from a PEM key, certificate or service-account JSON file."""
    with open(path, "r", encoding="utf-8") as f:
        text = f.read()
    if text.lstrip().startswith("{"):
        text = json.loads(text)["private_key"]
    m = re.search(r"-----BEGIN ([A-Z ]+)-----(.*?)-----END \1-----", text, re.S)
    if not m:
        raise KeyFormatError(f"{path}: no PEM block")
    kind = m.group(1)
    der = base64.b64decode("".join(m.group(2).split()))
    tag, s, e = _der_next(der, 0)
    if kind == "PUBLIC KEY":
        return _rsa_from_spki(der, s, e)
    if kind == "RSA PUBLIC KEY":
        return _rsa_from_pkcs1_public(der, 0, len(der))
    if kind == "RSA PRIVATE KEY":
        return _rsa_from_pkcs1_private(der, 0, len(der))
    if kind == "PRIVATE KEY":
        version, alg, octets = _der_children(der, s, e)[:3]
        oid = _der_children(der, alg[1], alg[2])[0]
        if der[oid[1]:oid[2]] != RSA_OID:
            raise KeyFormatError(f"{path}: not an RSA key")
        return _rsa_from_pkcs1_private(der, octets[1], octets[2])
    if kind == "CERTIFICATE":
        tbs = _der_children(der, s, e)[0]
        fields = _der_children(der, tbs[1], tbs[2])
        if fields[0][0] == 0xA0:  # explicit [0] version
            fields = fields[1:]
        spki = fields[5]
        return _rsa_from_spki(der, spki[1], spki[2])
    raise KeyFormatError(f"{path}: unsupported PEM type {kind} (encrypted keys are not supported)")


SHA256_DIGEST_INFO = bytes.fromhex("3031300d060960864801650304020105000420")


def rs256_verify(key: tuple[int, int], signing_input: bytes, signature: bytes) -> bool:
    n, e = key
    k = (n.bit_length() + 7) // 8
    if len(signature) != k:
        return False
    s = int.from_bytes(signature, "big")
    if s >= n:
        return False
    em = pow(s, e, n).to_bytes(k, "big")
    t = SHA256_DIGEST_INFO + hashlib.sha256(signing_input).digest()
    if k < len(t) + 11:
        return False
    expected = b"\x00\x01" + b"\xff" * (k - len(t) - 3) + b"\x00" + t
    return secrets.compare_digest(em, expected)


def _b64url_decode(s: str) -> bytes:
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def verify_jwt_assertion(assertion: str, keys: list[tuple[int, int]]) -> str | None:
    """None if the assertion is acceptable, else why not."""
    if not keys:
        return "the server was started without --token-public-key"
    parts = assertion.split(".")
    if len(parts) != 3:
        return "assertion is not a JWS compact serialization (want 3 '.'-separated parts)"
    try:
        header = json.loads(_b64url_decode(parts[0]))
        claims = json.loads(_b64url_decode(parts[1]))
        signature = _b64url_decode(parts[2])
    except (ValueError, UnicodeDecodeError) as err:
        return f"assertion is not valid base64url JSON: {err}"
    if not isinstance(header, dict) or header.get("alg") != "RS256":
        return f"JWT alg must be RS256, got {header.get('alg') if isinstance(header, dict) else header!r}"
    signing_input = (parts[0] + "." + parts[1]).encode("ascii", "replace")
    if not any(rs256_verify(k, signing_input, signature) for k in keys):
        return "Invalid JWT Signature."
    if not isinstance(claims, dict):
        return "JWT claims are not a JSON object"
    if not isinstance(claims.get("iss"), str) or not claims["iss"]:
        return "JWT has no iss claim"
    aud = claims.get("aud")
    auds = aud if isinstance(aud, list) else [aud]
    if not any(isinstance(a, str) and a.endswith("/token") for a in auds):
        return f"JWT aud {aud!r} is not a token endpoint URL (ending in /token)"
    iat, exp = claims.get("iat"), claims.get("exp")
    if not isinstance(iat, (int, float)) or not isinstance(exp, (int, float)):
        return "JWT needs numeric iat and exp claims"
    now = time.time()
    if exp <= now:
        return "Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe. (expired)"
    if iat > now + 300:
        return "Invalid JWT: iat is in the future"
    if exp - iat > 3600 or exp <= iat:
        return "Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe."
    return None


# --------------------------------------------------------------------------- shaping

class Pacer:
    """A token bucket with no burst: reserve(n, rate) returns how long to wait
    before n more bytes may leave. Thread-safe."""

    def __init__(self):
        self._lock = threading.Lock()
        self._next = 0.0

    def reserve(self, nbytes: int, rate: float) -> float:
        with self._lock:
            now = time.monotonic()
            self._next = max(self._next, now) + nbytes / rate
            return self._next - now


class Shaping:
    """Link emulation settings plus the shared total-rate bucket. Thread-safe; a
    request reads the settings as it goes, so changes apply to transfers in flight."""

    def __init__(self, latency_ms=0.0, conn_rate=0.0, total_rate=0.0):
        self._lock = threading.Lock()
        self.latency_ms = float(latency_ms)
        self.conn_rate = float(conn_rate)
        self.total_rate = float(total_rate)
        self.total_pacer = Pacer()

    def snapshot(self) -> dict:
        with self._lock:
            return {"latency_ms": self.latency_ms, "conn_rate": self.conn_rate, "total_rate": self.total_rate}

    def update(self, values: dict) -> dict:
        parsed = {}
        for key in ("latency_ms", "conn_rate", "total_rate"):
            if key in values:
                v = values[key]
                if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
                    raise ValueError(f"{key} must be a number >= 0, got {v!r}")
                parsed[key] = float(v)
        unknown = set(values) - {"latency_ms", "conn_rate", "total_rate"}
        if unknown:
            raise ValueError(f"unknown shaping keys {sorted(unknown)}")
        with self._lock:
            for key, v in parsed.items():
                setattr(self, key, v)
        return self.snapshot()


# --------------------------------------------------------------------------- faults

FAULT_ACTIONS = {
    "status": ("status",),
    "reset_after": ("bytes",),
    "truncate_after": ("bytes",),
    "stall_after": ("bytes", "seconds"),
    "delay_first_byte": ("seconds",),
}


class FaultRule:
    """One validated /_control/faults rule. Its count is only touched under the
    owning FaultTable's lock."""

    def __init__(self, spec):
        if not isinstance(spec, dict):
            raise ValueError(f"a fault rule must be a JSON object, got {spec!r}")
        unknown = set(spec) - {"match", "action", "status", "bytes", "seconds", "then", "count"}
        if unknown:
            raise ValueError(f"unknown fault rule keys {sorted(unknown)}")
        self.spec = spec
        match = spec.get("match", {})
        if not isinstance(match, dict):
            raise ValueError("match must be a JSON object")
        unknown = set(match) - {"method", "path_regex", "media"}
        if unknown:
            raise ValueError(f"unknown match keys {sorted(unknown)}")
        self.method = match.get("method")
        if self.method is not None:
            self.method = str(self.method).upper()
        regex = match.get("path_regex")
        try:
            self.path_regex = re.compile(regex) if regex is not None else None
        except re.error as err:
            raise ValueError(f"bad path_regex {regex!r}: {err}") from err
        self.media = match.get("media")
        if self.media is not None and not isinstance(self.media, bool):
            raise ValueError("match.media must be true or false")
        self.action = spec.get("action")
        if self.action not in FAULT_ACTIONS:
            raise ValueError(f"action must be one of {sorted(FAULT_ACTIONS)}, got {self.action!r}")
        for param in FAULT_ACTIONS[self.action]:
            v = spec.get(param)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
                raise ValueError(f"action {self.action} needs \"{param}\" >= 0, got {v!r}")
        self.status = int(spec.get("status", 0))
        if self.action == "status" and not 100 <= self.status <= 599:
            raise ValueError(f"status {self.status} is not an HTTP status code")
        self.nbytes = int(spec.get("bytes", 0))
        self.seconds = float(spec.get("seconds", 0))
        self.then = spec.get("then", "continue")
        if self.then not in ("continue", "close"):
            raise ValueError("then must be \"continue\" or \"close\"")
        self.count = spec.get("count", 1)
        if not isinstance(self.count, int) or isinstance(self.count, bool) or self.count < -1 or self.count == 0:
            raise ValueError(f"count must be a positive integer or -1, got {self.count!r}")

    def matches(self, method: str, target: str, media: bool) -> bool:
        if self.method is not None and self.method != method:
            return False
        if self.media is not None and self.media != media:
            return False
        if self.path_regex is not None and not self.path_regex.search(target):
            return False
        return True

    def describe(self) -> dict:
        out = dict(self.spec)
        out["count"] = self.count
        return out


class FaultTable:
    """The ordered fault rules. Thread-safe: take() picks and consumes atomically."""

    def __init__(self):
        self._lock = threading.Lock()
        self._rules: list[FaultRule] = []

    def add(self, rules: list[FaultRule]):
        with self._lock:
            self._rules.extend(rules)

    def clear(self):
        with self._lock:
            self._rules.clear()

    def describe(self) -> list:
        with self._lock:
            return [r.describe() for r in self._rules]

    def take(self, method: str, target: str, media: bool) -> FaultRule | None:
        with self._lock:
            for i, rule in enumerate(self._rules):
                if rule.matches(method, target, media):
                    if rule.count > 0:
                        rule.count -= 1
                        if rule.count == 0:
                            del self._rules[i]
                    return rule
        return None


# --------------------------------------------------------------------------- stats

class Stats:
    """/_control/stats counters. Thread-safe."""

    COUNTERS = ("requests", "media_requests", "list_requests", "metadata_requests", "upload_requests",
                "delete_requests", "token_requests", "gce_metadata_requests", "bytes_served", "faults_applied",
                "s3_requests", "sts_requests", "imds_requests", "container_credentials_requests")

    def __init__(self):
        self._lock = threading.Lock()
        self._in_progress = 0  # a gauge: reset() leaves it alone
        self.reset()

    def begin(self):
        with self._lock:
            self._in_progress += 1

    def end(self):
        with self._lock:
            self._in_progress -= 1

    # Counts by key (see the module docstring's Stats).
    TALLIES = ("s3_signers", "s3_user_agents", "sts_web_identity_tokens")

    def reset(self):
        with self._lock:
            self._counters = dict.fromkeys(self.COUNTERS, 0)
            self._ranges = collections.deque(maxlen=RANGES_KEPT)
            self._auth = {"Bearer": 0, "none": 0}
            self._codes: dict[str, int] = {}
            self._tallies: dict[str, dict[str, int]] = {name: {} for name in self.TALLIES}
            self._sts_issued: dict[str, str] = {}

    def tally(self, name: str, key: str):
        with self._lock:
            self._tallies[name][key] = self._tallies[name].get(key, 0) + 1

    def sts_issued(self, access_key_id: str, web_identity_token: str):
        with self._lock:
            self._sts_issued[access_key_id] = web_identity_token

    def add(self, counter: str, n: int = 1):
        with self._lock:
            self._counters[counter] += n

    def auth(self, scheme: str):
        with self._lock:
            self._auth[scheme] = self._auth.get(scheme, 0) + 1

    def status(self, code: int):
        with self._lock:
            self._codes[str(code)] = self._codes.get(str(code), 0) + 1

    def range(self, offset: int, length: int, name: str):
        with self._lock:
            self._ranges.append([offset, length, name])

    def snapshot(self) -> dict:
        with self._lock:
            out = dict(self._counters)
            out["ranges"] = list(self._ranges)
            out["auth_headers"] = dict(self._auth)
            out["status_codes"] = dict(self._codes)
            out["requests_in_progress"] = self._in_progress
            for name, counts in self._tallies.items():
                out[name] = dict(counts)
            out["sts_issued"] = dict(self._sts_issued)
            return out


class Tokens:
    """Issued access tokens and their expiry. Thread-safe."""

    def __init__(self, lifetime: int):
        self._lock = threading.Lock()
        self._expiry: dict[str, float] = {}
        self.lifetime = lifetime

    def issue(self) -> dict:
        token = "tok-" + secrets.token_urlsafe(24)
        now = time.time()
        with self._lock:
            self._expiry = {t: e for t, e in self._expiry.items() if e > now}
            self._expiry[token] = now + self.lifetime
        return {"access_token": token, "expires_in": self.lifetime, "token_type": "Bearer"}

    def valid(self, token: str) -> bool:
        with self._lock:
            expiry = self._expiry.get(token)
        return expiry is not None and expiry > time.time()

    def revoke_all(self):
        with self._lock:
            self._expiry.clear()


# --------------------------------------------------------------------------- store

class HttpError(Exception):
    def __init__(self, code: int, message: str, reason: str = ""):
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason


def generation_of(st: os.stat_result) -> int:
    return max(st.st_mtime_ns, 1)


def rfc3339(ns: int) -> str:
    dt = datetime.datetime.fromtimestamp(ns // 1_000_000_000, tz=datetime.timezone.utc)
    return dt.strftime("%Y-%m-%dT%H:%M:%S") + f".{(ns // 1_000_000) % 1000:03d}Z"


def content_type_for(name: str) -> str:
    if name.endswith(".json"):
        return "application/json"
    if name.endswith(".txt"):
        return "text/plain"
    return "application/octet-stream"


def quote_name(name: str) -> str:
    return urllib.parse.quote(name, safe="")


class Store:
    """Maps buckets and object names onto DATA_DIR. Thread-safe: reads are plain file
    system calls; uploads and deletes serialize on one lock."""

    def __init__(self, root: str):
        self.root = os.path.abspath(root)
        self.hashes = HashCache()
        self.write_lock = threading.Lock()

    def bucket_dir(self, bucket: str) -> str:
        if not bucket or "/" in bucket or bucket.startswith(".") or "\0" in bucket:
            raise HttpError(404, f"The specified bucket does not exist: {bucket!r}", "notFound")
        path = os.path.join(self.root, bucket)
        if not os.path.isdir(path):
            raise HttpError(404, f"The specified bucket does not exist: {bucket}", "notFound")
        return path

    @staticmethod
    def name_segments(name: str) -> list[str] | None:
        """The path segments of an object name, or None if it cannot be a file."""
        if not name or "\0" in name or len(name.encode("utf-8", "surrogatepass")) > 1024:
            return None
        segments = name.split("/")
        for seg in segments:
            if seg in ("", ".", "..") or seg.startswith(TMP_PREFIX):
                return None
        return segments

    def object_path(self, bucket: str, name: str) -> str:
        bdir = self.bucket_dir(bucket)
        segments = self.name_segments(name)
        if segments is None:
            raise HttpError(404, f"No such object: {bucket}/{name}", "notFound")
        return os.path.join(bdir, *segments)

    def stat_object(self, bucket: str, name: str) -> tuple[str, os.stat_result]:
        path = self.object_path(bucket, name)
        try:
            st = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            raise HttpError(404, f"No such object: {bucket}/{name}", "notFound") from None
        except OSError as err:
            if err.errno == 36:  # ENAMETOOLONG
                raise HttpError(404, f"No such object: {bucket}/{name}", "notFound") from None
            raise
        if not os.path.isfile(path):
            raise HttpError(404, f"No such object: {bucket}/{name}", "notFound")
        return path, st

    def resource(self, base_url: str, bucket: str, name: str, path: str, st: os.stat_result) -> dict:
        gen = generation_of(st)
        md5, crc = self.hashes.get(path, st)
        encoded = quote_name(name)
        return {
            "kind": "storage#object",
            "id": f"{bucket}/{name}/{gen}",
            "selfLink": f"{base_url}/storage/v1/b/{quote_name(bucket)}/o/{encoded}",
            "mediaLink": f"{base_url}/download/storage/v1/b/{quote_name(bucket)}/o/{encoded}"
                         f"?generation={gen}&alt=media",
            "name": name,
            "bucket": bucket,
            "generation": str(gen),
            "metageneration": "1",
            "contentType": content_type_for(name),
            "storageClass": "STANDARD",
            "size": str(st.st_size),
            "md5Hash": md5,
            "crc32c": crc,
            "etag": base64.b64encode(gen.to_bytes(8, "big") + b"\x01").decode(),
            "timeCreated": rfc3339(gen),
            "updated": rfc3339(gen),
            "timeStorageClassUpdated": rfc3339(gen),
        }

    def walk(self, bucket: str, prefix: str):
        """Yields (name, path) of every object whose name starts with prefix."""
        bdir = self.bucket_dir(bucket)
        start_dir, start_name = bdir, ""
        head = prefix.rpartition("/")[0]
        if head and self.name_segments(head) is not None:
            candidate = os.path.join(bdir, *head.split("/"))
            if not os.path.isdir(candidate):
                return
            start_dir, start_name = candidate, head + "/"
        seen = set()
        stack = [(start_dir, start_name)]
        while stack:
            directory, name_prefix = stack.pop()
            try:
                st = os.stat(directory)
                if (st.st_dev, st.st_ino) in seen:
                    continue
                seen.add((st.st_dev, st.st_ino))
                entries = list(os.scandir(directory))
            except OSError:
                continue
            for entry in entries:
                if entry.name.startswith(TMP_PREFIX):
                    continue
                try:
                    entry.name.encode("utf-8")
                except UnicodeEncodeError:
                    continue  # not a valid UTF-8 file name: no GCS name for it
                name = name_prefix + entry.name
                try:
                    if entry.is_dir():
                        if name.startswith(prefix) or prefix.startswith(name + "/"):
                            stack.append((entry.path, name + "/"))
                    elif entry.is_file() and name.startswith(prefix):
                        yield name, entry.path
                except OSError:
                    continue

    def list(self, bucket: str, prefix: str, delimiter: str, start_offset: str, end_offset: str,
             page_token: str, max_results: int) -> tuple[list[tuple[str, str]], list[str], str | None]:
        """One page: ([(name, path)], [prefix], next_page_token)."""
        after = ""
        if page_token:
            try:
                after = base64.urlsafe_b64decode(page_token.encode()).decode("utf-8")
            except (ValueError, UnicodeDecodeError):
                raise HttpError(400, f"Invalid pageToken {page_token!r}", "invalid") from None
        entries: dict[str, str | None] = {}  # name -> path (None for a rolled-up prefix)
        for name, path in self.walk(bucket, prefix):
            if start_offset and name < start_offset:
                continue
            if end_offset and name >= end_offset:
                continue
            if delimiter:
                cut = name.find(delimiter, len(prefix))
                if cut >= 0:
                    entries[name[:cut + len(delimiter)]] = None
                    continue
            entries[name] = path
        ordered = sorted(k for k in entries if k > after)
        page = ordered[:max_results]
        token = None
        if len(ordered) > max_results:
            token = base64.urlsafe_b64encode(page[-1].encode("utf-8")).decode()
        items = [(k, entries[k]) for k in page if entries[k] is not None]
        prefixes = [k for k in page if entries[k] is None]
        return items, prefixes, token

    def upload(self, bucket: str, name: str, body: bytes, if_generation_match: int | None,
               if_generation_not_match: int | None) -> tuple[str, os.stat_result]:
        bdir = self.bucket_dir(bucket)
        segments = self.name_segments(name)
        if segments is None:
            raise HttpError(400, f"Object name {name!r} cannot be stored by this server "
                                 "(empty, '.' or '..' segment, trailing '/', NUL or over 1024 bytes)",
                            "invalid")
        path = os.path.join(bdir, *segments)
        with self.write_lock:
            try:
                old = os.stat(path)
                if not os.path.isfile(path):
                    raise HttpError(409, f"{name!r} is a prefix of existing objects", "conflict")
            except (FileNotFoundError,):
                old = None
            except NotADirectoryError:
                raise HttpError(409, f"A parent of {name!r} is an existing object", "conflict") from None
            old_gen = generation_of(old) if old else 0
            if if_generation_match is not None and if_generation_match != old_gen:
                raise HttpError(412, f"ifGenerationMatch={if_generation_match} but the object's "
                                     f"generation is {old_gen}", "conditionNotMet")
            if if_generation_not_match is not None and if_generation_not_match == old_gen:
                raise HttpError(412, f"ifGenerationNotMatch={if_generation_not_match} matches", "conditionNotMet")
            parent = os.path.dirname(path)
            try:
                os.makedirs(parent, exist_ok=True)
            except (FileExistsError, NotADirectoryError):
                raise HttpError(409, f"A parent of {name!r} is an existing object", "conflict") from None
            tmp = os.path.join(parent, TMP_PREFIX + secrets.token_hex(8))
            try:
                with open(tmp, "wb") as f:
                    f.write(body)
                st = os.stat(tmp)
                if generation_of(st) <= old_gen:
                    os.utime(tmp, ns=(old_gen + 1, old_gen + 1))
                os.rename(tmp, path)
            except BaseException:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
                raise
            return path, os.stat(path)

    def delete(self, path: str):
        with self.write_lock:
            os.unlink(path)


# --------------------------------------------------------------------------- HTTP

class Server(http.server.ThreadingHTTPServer):
    """One thread per connection; all shared state lives in thread-safe members."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 512

    def __init__(self, address, args):
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.args = args
        self.store = Store(args.data)
        self.shaping = Shaping(args.latency_ms, args.conn_rate, args.total_rate)
        self.faults = FaultTable()
        self.stats = Stats()
        self.tokens = Tokens(args.token_lifetime)
        self.keys = [load_rsa_public_key(p) for p in (args.token_public_key or [])]
        self.s3 = s3_dialect.S3Dialect(args, FileBody)
        self.tls_context = None
        if args.tls_cert:
            self.tls_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self.tls_context.load_cert_chain(args.tls_cert, args.tls_key)
            self.tls_context.set_alpn_protocols(["http/1.1"])
        super().__init__(address, Handler)

    def finish_request(self, request, client_address):
        """Runs on the connection's thread: a TLS handshake record as the first
        byte makes it a TLS connection (see --tls-cert)."""
        if self.tls_context is None:
            return super().finish_request(request, client_address)
        try:
            request.settimeout(30)
            tls = request.recv(1, socket.MSG_PEEK) == b"\x16"
            if tls:
                request = self.tls_context.wrap_socket(request, server_side=True)
            request.settimeout(None)
        except (ssl.SSLError, OSError) as err:
            if not self.args.quiet:
                sys.stderr.write(f"gcs_test_server: TLS handshake with {client_address[0]} failed: {err}\n")
            return
        try:
            super().finish_request(request, client_address)
        finally:
            if tls:
                request.close()

    def handle_error(self, request, client_address):
        if isinstance(sys.exc_info()[1], CONNECTION_ERRORS):
            return
        traceback.print_exc()


class FileBody:
    def __init__(self, fd: int, offset: int, length: int):
        self.fd = fd
        self.offset = offset
        self.length = length


class Handler(http.server.BaseHTTPRequestHandler):
    """Serves one connection (keep-alive: many requests) on its own thread."""

    protocol_version = "HTTP/1.1"
    server_version = "gcs-test-server"
    sys_version = ""
    server: Server

    def setup(self):
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.conn_pacer = Pacer()

    def log_message(self, format, *args):
        if not self.server.args.quiet:
            sys.stderr.write(f"gcs_test_server: {self.address_string()} {format % args}\n")

    def do_GET(self):
        self._dispatch("GET")

    def do_POST(self):
        self._dispatch("POST")

    def do_DELETE(self):
        self._dispatch("DELETE")

    def do_PUT(self):
        self._dispatch("PUT")

    def do_PATCH(self):
        self._dispatch("PATCH")

    def do_HEAD(self):
        self._dispatch("HEAD")

    # ------------------------------------------------------------------ plumbing

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _base_url(self) -> str:
        host = self.headers.get("Host")
        if not host:
            h, p = self.server.server_address[:2]
            host = f"[{h}]:{p}" if ":" in h else f"{h}:{p}"
        return f"http://{host}"

    def _dispatch(self, method: str):
        self._fault = None
        self._shaped = False
        self._counted = False
        self._media = False
        self._head_sent = False
        try:
            target = self.path
            path, _, query = target.partition("?")
            params = dict(urllib.parse.parse_qsl(query, keep_blank_values=True))
            body = self._read_body()
            if path.startswith("/_control/"):
                self._control(method, path, body)
                return
            self.server.stats.begin()
            try:
                self._dispatch_storage(method, target, path, params, body)
            finally:
                self.server.stats.end()
        except CONNECTION_ERRORS:
            self.close_connection = True
        except Exception as err:  # a bug here must not hang the client: answer 500
            traceback.print_exc()
            self.close_connection = True
            if not self._head_sent:
                try:
                    self._send_error(500, f"gcs_test_server internal error: {err!r}", "internalError")
                except CONNECTION_ERRORS:
                    pass

    def _dispatch_storage(self, method, target, path, params, body):
        """_dispatch for every request but the control API's; counted in
        requests_in_progress until its counters are all added."""
        route = self._route(method, path, params)
        kind = route[0]
        self._media = kind in MEDIA_KINDS
        self._count_request(kind)
        self._fault = self.server.faults.take(method, target, self._media)
        if self._fault is not None:
            self.server.stats.add("faults_applied")
        if self._fault is not None and self._fault.action == "delay_first_byte":
            time.sleep(self._fault.seconds)
        if kind in STORAGE_KINDS:
            self._shaped = True
            latency = self.server.shaping.latency_ms
            if latency > 0:
                time.sleep(latency / 1000.0)
        if self._fault is not None and self._fault.action == "status":
            code = self._fault.status
            if kind in S3_KINDS:
                self.server.s3.send_fault_status(self, code, method == "HEAD")
            else:
                self._send_error(code, f"Injected fault: HTTP {code}", "injectedFault")
            return
        if kind in S3_KINDS:
            self.server.s3.handle(self, kind, route[1], route[2], method, params, body)
            return
        try:
            self._handle(kind, route[1], route[2], method, params, body)
        except HttpError as err:
            self._send_error(err.code, err.message, err.reason)

    def _route(self, method, path, params):
        """(kind, bucket, object_name); object_name is percent-decoded."""
        s3 = self.server.s3.route(method, path, self.headers.get("Host", ""), params)
        if s3 is not None:
            return s3
        for base, media in (("/storage/v1/b/", False), ("/download/storage/v1/b/", True)):
            if path.startswith(base):
                bucket_enc, sep, rest = path[len(base):].partition("/")
                bucket = urllib.parse.unquote(bucket_enc)
                if not sep and not media:
                    return ("bucket", bucket, None) if method == "GET" else ("storage", bucket, None)
                if rest in ("o", "o/") and not media:
                    return ("list", bucket, None) if method == "GET" else ("storage", bucket, None)
                if rest.startswith("o/"):
                    name = urllib.parse.unquote(rest[2:])
                    if method == "DELETE" and not media:
                        return ("delete", bucket, name)
                    if method == "GET":
                        if media or params.get("alt") == "media":
                            return ("media", bucket, name)
                        return ("object", bucket, name)
                return ("storage", bucket, None)
        if path.startswith("/upload/storage/v1/b/"):
            bucket_enc, _, rest = path[len("/upload/storage/v1/b/"):].partition("/")
            if method == "POST" and rest in ("o", "o/"):
                return ("upload", urllib.parse.unquote(bucket_enc), params.get("name", ""))
            return ("storage", None, None)
        if path == "/token":
            return ("token", None, None)
        if path == "/" or path.startswith("/computeMetadata/"):
            return ("gce", None, None)
        return ("unknown", None, None)

    def _count_request(self, kind):
        stats = self.server.stats
        if kind in STORAGE_KINDS:
            stats.add("requests")
            auth = self.headers.get("Authorization")
            stats.auth(auth.split(None, 1)[0] if auth and auth.split() else "none")
            counter = {"media": "media_requests", "list": "list_requests", "object": "metadata_requests",
                       "upload": "upload_requests", "delete": "delete_requests", "s3_media": "media_requests",
                       "s3_list": "list_requests", "s3_object": "metadata_requests"}.get(kind)
            if counter:
                stats.add(counter)
            if kind in S3_KINDS:
                stats.add("s3_requests")
            self._counted = True
        elif kind in ("sts", "imds", "container"):
            self._counted = True  # counted by the S3 dialect's endpoints
        elif kind == "token":
            stats.add("token_requests")
            self._counted = True
        elif kind == "gce":
            stats.add("gce_metadata_requests")
            if self.path.partition("?")[0].endswith("/service-accounts/default/token"):
                stats.add("token_requests")
            self._counted = True

    # ------------------------------------------------------------------ responses

    def _send_json(self, code: int, obj, extra_headers=()):
        body = json.dumps(obj, ensure_ascii=False).encode("utf-8") + b"\n"
        self._send(code, [("Content-Type", "application/json; charset=UTF-8"), *extra_headers], body)

    def _send_error(self, code: int, message: str, reason: str = "", extra_headers=()):
        if code == 304:
            self._send(304, list(extra_headers), b"")
            return
        headers = list(extra_headers)
        if code == 401 and not any(k == "WWW-Authenticate" for k, _ in headers):
            headers.append(("WWW-Authenticate", 'Bearer realm="gcs_test_server"'))
        self._send_json(code, {"error": {"code": code, "message": message,
                                         "errors": [{"message": message, "domain": "global",
                                                     "reason": reason or "error"}]}}, headers)

    def _send_text(self, code: int, text: str, extra_headers=()):
        self._send(code, [("Content-Type", "text/plain; charset=UTF-8"), *extra_headers], text.encode("utf-8"))

    def _head_bytes(self, code: int, headers, length: int | None) -> bytes:
        reason = self.responses.get(code, ("Error",))[0]
        lines = [f"HTTP/1.1 {code} {reason}", f"Date: {self.date_time_string()}", "Server: gcs-test-server"]
        lines += [f"{k}: {v}" for k, v in headers]
        if length is not None:
            lines.append(f"Content-Length: {length}")
        if self.close_connection:
            lines.append("Connection: close")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def _send(self, code: int, headers, body, head_only: bool = False):
        """Writes one response; body is bytes or a FileBody. Applies the request's
        fault rule and, for storage requests, the rate caps. With head_only (the
        answer to a HEAD), the head says the body's Content-Length but no body follows."""
        if self._counted:
            self.server.stats.status(code)
        self.log_request(code)
        head_only = head_only or self.command == "HEAD"
        no_body = code in (204, 304)
        length = None if no_body else (body.length if isinstance(body, FileBody) else len(body))
        head = self._head_bytes(code, headers, length)
        self._head_sent = True
        if no_body or head_only:
            self.connection.sendall(head)
            return
        fault = self._fault if self._fault is not None and self._fault.action in (
            "reset_after", "truncate_after", "stall_after") else None
        shaping = self.server.shaping
        conn_rate, total_rate = shaping.conn_rate, shaping.total_rate
        paced = self._shaped and (conn_rate > 0 or total_rate > 0)
        if fault is None and not paced:
            self._send_fast(head, body)
            return
        self.connection.sendall(head)
        limit = length if fault is None or fault.action == "stall_after" else min(fault.nbytes, length)
        stall_at = min(fault.nbytes, length) if fault is not None and fault.action == "stall_after" else None
        pos = 0
        while pos < limit:
            if stall_at is not None and pos == stall_at:
                time.sleep(fault.seconds)
                stall_at = None
                if fault.then == "close":
                    self.close_connection = True
                    return
            end = limit if stall_at is None else stall_at
            chunk = min(end - pos, MAX_CHUNK)
            if paced:
                chunk = min(chunk, max(MIN_CHUNK, int(min(r for r in (conn_rate, total_rate) if r > 0) / 50)))
                # The connection's own cap first, then a slot on the shared
                # link: a slot taken while still waiting on the connection cap
                # would go unused and waste the link's capacity.
                if conn_rate > 0:
                    time.sleep(self.conn_pacer.reserve(chunk, conn_rate))
                if total_rate > 0:
                    time.sleep(shaping.total_pacer.reserve(chunk, total_rate))
            self._send_part(body, pos, chunk)
            pos += chunk
            if paced:
                conn_rate, total_rate = shaping.conn_rate, shaping.total_rate
                paced = conn_rate > 0 or total_rate > 0
        if stall_at is not None:  # stall point at the end of the body
            time.sleep(fault.seconds)
            if fault.then == "close":
                self.close_connection = True
                return
        if fault is not None and fault.action == "reset_after":
            self._reset_connection()
        elif fault is not None and fault.action == "truncate_after" and limit < length:
            self.close_connection = True

    def _send_part(self, body, pos: int, n: int):
        if isinstance(body, FileBody):
            self._sendfile(body.fd, body.offset + pos, n)
        else:
            self.connection.sendall(memoryview(body)[pos:pos + n])

    def _sendfile(self, fd: int, offset: int, n: int):
        if isinstance(self.connection, ssl.SSLSocket):
            return self._send_file_tls(fd, offset, n)
        sock_fd = self.connection.fileno()
        end = offset + n
        try:
            while offset < end:
                sent = os.sendfile(sock_fd, fd, offset, end - offset)
                if sent == 0:
                    raise ConnectionAbortedError("file shrank while being sent")
                offset += sent
                if self._media:
                    self.server.stats.add("bytes_served", sent)
        except BlockingIOError:
            raise TimeoutError("socket send timed out") from None

    def _send_file_tls(self, fd: int, offset: int, n: int):
        """sendfile cannot go through TLS: read into one buffer, write it encrypted."""
        buf = bytearray(min(n, 1 << 20))
        view = memoryview(buf)
        end = offset + n
        while offset < end:
            want = min(len(buf), end - offset)
            got = os.preadv(fd, [view[:want]], offset)
            if got == 0:
                raise ConnectionAbortedError("file shrank while being sent")
            self.connection.sendall(view[:got])
            offset += got
            if self._media:
                self.server.stats.add("bytes_served", got)

    def _send_fast(self, head: bytes, body):
        if not isinstance(body, FileBody):
            self.connection.sendall(head + body)
            return
        sock = self.connection
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
        try:
            sock.sendall(head)
            self._sendfile(body.fd, body.offset, body.length)
        finally:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 0)
            except OSError:
                pass

    def _reset_connection(self):
        """Closes the socket so that the peer sees RST, not FIN."""
        self.close_connection = True
        sock = self.connection
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
        self.rfile.close()  # drops the last reference; the descriptor closes now

    # ------------------------------------------------------------------ endpoints

    def _handle(self, kind, bucket, name, method, params, body):
        if kind in STORAGE_KINDS:
            self._check_auth()
        if kind == "bucket":
            self.server.store.bucket_dir(bucket)
            self._send_json(200, {"kind": "storage#bucket", "id": bucket, "name": bucket,
                                  "selfLink": f"{self._base_url()}/storage/v1/b/{quote_name(bucket)}",
                                  "location": "US", "storageClass": "STANDARD", "metageneration": "1"})
        elif kind == "list":
            self._list(bucket, params)
        elif kind in ("object", "media", "delete"):
            self._object(kind, bucket, name, params)
        elif kind == "upload":
            self._upload(bucket, name, params, body)
        elif kind == "token":
            self._token(method, body)
        elif kind == "gce":
            self._gce(method)
        elif kind == "storage":
            raise HttpError(405 if method != "GET" else 404,
                            f"{method} {self.path.partition('?')[0]} is not supported by this server",
                            "notSupported")
        else:
            raise HttpError(404, f"Not Found: {self.path.partition('?')[0]}", "notFound")

    def _check_auth(self):
        if not self.server.args.require_auth:
            return
        auth = self.headers.get("Authorization", "")
        scheme, _, token = auth.partition(" ")
        if scheme != "Bearer" or not token.strip():
            raise HttpError(401, "Anonymous caller does not have storage.objects.get access "
                                 "(send Authorization: Bearer TOKEN)", "required")
        if not self.server.tokens.valid(token.strip()):
            raise HttpError(401, "Invalid Credentials: the bearer token was not issued by this "
                                 "server or has expired", "authError")

    @staticmethod
    def _int_param(params, key) -> int | None:
        value = params.get(key)
        if value is None or value == "":
            return None
        try:
            return int(value)
        except ValueError:
            raise HttpError(400, f"Invalid value for {key}: {value!r}", "invalid") from None

    def _list(self, bucket, params):
        max_results = self._int_param(params, "maxResults") or MAX_RESULTS
        if max_results < 1 or max_results > MAX_RESULTS:
            max_results = MAX_RESULTS
        store = self.server.store
        items, prefixes, token = store.list(bucket, params.get("prefix", ""), params.get("delimiter", ""),
                                            params.get("startOffset", ""), params.get("endOffset", ""),
                                            params.get("pageToken", ""), max_results)
        base = self._base_url()
        resources = []
        for name, path in items:
            try:
                st = os.stat(path)
            except OSError:
                continue  # deleted since the walk
            resources.append(store.resource(base, bucket, name, path, st))
        out = {"kind": "storage#objects"}
        if token:
            out["nextPageToken"] = token
        if prefixes:
            out["prefixes"] = prefixes
        if resources:
            out["items"] = resources
        self._send_json(200, out)

    def _check_preconditions(self, params, gen: int, bucket: str, name: str, is_get: bool):
        want = self._int_param(params, "generation")
        if want is not None and want != gen:
            raise HttpError(404, f"No such object: {bucket}/{name}#{want} (current generation {gen})",
                            "notFound")
        match = self._int_param(params, "ifGenerationMatch")
        if match is not None and match != gen:
            raise HttpError(412, f"At least one of the pre-conditions you specified did not hold: "
                                 f"ifGenerationMatch={match}, generation is {gen}", "conditionNotMet")
        not_match = self._int_param(params, "ifGenerationNotMatch")
        if not_match is not None and not_match == gen:
            if is_get:
                raise HttpError(304, "Not Modified", "notModified")
            raise HttpError(412, f"ifGenerationNotMatch={not_match} matches", "conditionNotMet")

    def _object(self, kind, bucket, name, params):
        store = self.server.store
        path, st = store.stat_object(bucket, name)
        if kind == "delete":
            self._check_preconditions(params, generation_of(st), bucket, name, False)
            try:
                store.delete(path)
            except FileNotFoundError:
                raise HttpError(404, f"No such object: {bucket}/{name}", "notFound") from None
            self._send(204, [], b"")
            return
        if kind == "object":
            self._check_preconditions(params, generation_of(st), bucket, name, True)
            self._send_json(200, store.resource(self._base_url(), bucket, name, path, st))
            return
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except (FileNotFoundError, NotADirectoryError):
            raise HttpError(404, f"No such object: {bucket}/{name}", "notFound") from None
        try:
            st = os.fstat(fd)  # the generation of the bytes actually sent
            gen = generation_of(st)
            self._check_preconditions(params, gen, bucket, name, True)
            size = st.st_size
            headers = [("Content-Type", content_type_for(name)), ("Accept-Ranges", "bytes"),
                       ("ETag", '"' + base64.b64encode(gen.to_bytes(8, "big") + b"\x01").decode() + '"'),
                       ("x-goog-generation", str(gen)), ("x-goog-metageneration", "1"),
                       ("x-goog-stored-content-length", str(size)),
                       ("x-goog-stored-content-encoding", "identity"),
                       ("Last-Modified", self.date_time_string(st.st_mtime))]
            rng = self._parse_range(self.headers.get("Range"), size)
            if rng == "unsatisfiable":
                self._send_error(416, f"Request range not satisfiable for {bucket}/{name} of size {size}",
                                 "requestedRangeNotSatisfiable",
                                 [("Content-Range", f"bytes */{size}")])
                return
            if rng is None:
                code, offset, length = 200, 0, size
            else:
                code, (offset, length) = 206, rng
                headers.append(("Content-Range", f"bytes {offset}-{offset + length - 1}/{size}"))
            self.server.stats.range(offset, length, name)
            self._send(code, headers, FileBody(fd, offset, length))
        finally:
            os.close(fd)

    @staticmethod
    def _parse_range(header: str | None, size: int):
        """None (whole object), (offset, length), or "unsatisfiable"."""
        if not header:
            return None
        m = re.fullmatch(r"\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*", header)
        if not m or (m.group(1) == "" and m.group(2) == ""):
            return None
        first, last = m.group(1), m.group(2)
        if first == "":
            n = int(last)
            if n == 0 or size == 0:
                return "unsatisfiable"
            n = min(n, size)
            return size - n, n
        a = int(first)
        if last != "" and int(last) < a:
            return None
        if a >= size:
            return "unsatisfiable"
        b = size - 1 if last == "" else min(int(last), size - 1)
        return a, b - a + 1

    def _upload(self, bucket, name, params, body):
        upload_type = params.get("uploadType", "")
        if upload_type != "media":
            raise HttpError(400, f"uploadType={upload_type!r} is not supported; use uploadType=media", "invalid")
        if not name:
            raise HttpError(400, "Required parameter: name", "required")
        store = self.server.store
        path, st = store.upload(bucket, name, body, self._int_param(params, "ifGenerationMatch"),
                                self._int_param(params, "ifGenerationNotMatch"))
        self._send_json(200, store.resource(self._base_url(), bucket, name, path, st))

    def _token(self, method, body):
        if method != "POST":
            raise HttpError(405, "The token endpoint takes POST", "notSupported")
        try:
            form = dict(urllib.parse.parse_qsl(body.decode("utf-8"), keep_blank_values=True))
        except UnicodeDecodeError:
            form = {}
        grant = form.get("grant_type", "")
        args = self.server.args
        if grant == "urn:ietf:params:oauth:grant-type:jwt-bearer":
            problem = verify_jwt_assertion(form.get("assertion", ""), self.server.keys)
        elif grant == "refresh_token":
            if args.refresh_token is None:
                problem = "the server was started without --refresh-token"
            elif (form.get("client_id"), form.get("client_secret"), form.get("refresh_token")) != (
                    args.refresh_client_id, args.refresh_client_secret, args.refresh_token):
                problem = "Bad Request: client_id, client_secret or refresh_token does not match"
            else:
                problem = None
        else:
            self._send_json(400, {"error": "unsupported_grant_type",
                                  "error_description": f"Invalid grant_type: {grant!r}"})
            return
        if problem is not None:
            self._send_json(400, {"error": "invalid_grant", "error_description": problem})
            return
        self._send_json(200, self.server.tokens.issue())

    def _gce(self, method):
        flavor = [("Metadata-Flavor", "Google")]
        if method != "GET":
            raise HttpError(405, "The metadata server takes GET", "notSupported")
        if self.headers.get("Metadata-Flavor") != "Google":
            self._send_text(403, "Missing required header: Metadata-Flavor: Google\n", flavor)
            return
        path = self.path.partition("?")[0]
        if path.endswith("/instance/service-accounts/default/token"):
            self._send_json(200, self.server.tokens.issue(), flavor)
        elif path.endswith("/instance/service-accounts/default/email"):
            self._send_text(200, SERVICE_ACCOUNT_EMAIL, flavor)
        elif path == "/computeMetadata/v1/project/project-id":
            self._send_text(200, PROJECT_ID, flavor)
        elif path in ("/", "/computeMetadata/v1", "/computeMetadata/v1/"):
            self._send_text(200, "computeMetadata/\n", flavor)
        else:
            self._send_text(404, f"Not found: {path}\n", flavor)

    # ------------------------------------------------------------------ control

    def _control(self, method, path, body):
        server = self.server
        try:
            payload = json.loads(body) if body.strip() else None
        except ValueError as err:
            self._send_json(400, {"ok": False, "error": f"body is not JSON: {err}"})
            return
        try:
            if path == "/_control/health" and method == "GET":
                self._send_text(200, "ok")
            elif path == "/_control/faults" and method == "POST":
                specs = payload if isinstance(payload, list) else [payload]
                rules = [FaultRule(spec) for spec in specs]
                server.faults.add(rules)
                self._send_json(200, {"ok": True})
            elif path == "/_control/faults" and method == "DELETE":
                server.faults.clear()
                self._send_json(200, {"ok": True})
            elif path == "/_control/faults" and method == "GET":
                self._send_json(200, {"rules": server.faults.describe()})
            elif path == "/_control/stats" and method == "GET":
                self._send_json(200, server.stats.snapshot())
            elif path == "/_control/stats/reset" and method == "POST":
                server.stats.reset()
                self._send_json(200, {"ok": True})
            elif path == "/_control/shaping" and method == "GET":
                self._send_json(200, server.shaping.snapshot())
            elif path == "/_control/shaping" and method == "POST":
                if not isinstance(payload, dict):
                    raise ValueError("body must be a JSON object")
                self._send_json(200, {"ok": True, **server.shaping.update(payload)})
            elif path == "/_control/tokens/revoke" and method == "POST":
                server.tokens.revoke_all()
                self._send_json(200, {"ok": True})
            elif path.startswith("/_control/s3/") and server.s3.control(self, method, path, payload):
                pass
            else:
                self._send_json(404, {"ok": False, "error": f"no control endpoint {method} {path}"})
        except ValueError as err:
            self._send_json(400, {"ok": False, "error": str(err)})


# --------------------------------------------------------------------------- main

def parse_args(argv):
    p = argparse.ArgumentParser(description="GCS-compatible test server (see the module docstring).")
    p.add_argument("--data", required=True, help="directory whose subdirectories are buckets")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--port-file")
    p.add_argument("--latency-ms", type=float, default=0.0)
    p.add_argument("--conn-rate", type=float, default=0.0)
    p.add_argument("--total-rate", type=float, default=0.0)
    p.add_argument("--require-auth", action="store_true")
    p.add_argument("--token-public-key", action="append")
    p.add_argument("--token-lifetime", type=int, default=3600)
    p.add_argument("--refresh-client-id")
    p.add_argument("--refresh-client-secret")
    p.add_argument("--refresh-token")
    p.add_argument("--precompute-hashes", action="store_true")
    p.add_argument("--quiet", action="store_true")
    p.add_argument("--tls-cert", help="PEM certificate (chain): also serve TLS on the port")
    p.add_argument("--tls-key", help="PEM private key of --tls-cert")
    s3_dialect.add_arguments(p)
    args = p.parse_args(argv)
    if (args.tls_cert is None) != (args.tls_key is None):
        p.error("--tls-cert and --tls-key go together")
    refresh = (args.refresh_client_id, args.refresh_client_secret, args.refresh_token)
    if any(v is not None for v in refresh) and any(v is None for v in refresh):
        p.error("--refresh-client-id, --refresh-client-secret and --refresh-token go together")
    if not os.path.isdir(args.data):
        p.error(f"--data {args.data}: not a directory")
    for name in ("latency_ms", "conn_rate", "total_rate"):
        if getattr(args, name) < 0:
            p.error(f"--{name.replace('_', '-')} must be >= 0")
    if args.token_lifetime < 1:
        p.error("--token-lifetime must be >= 1")
    return args


def precompute_hashes(store: Store):
    for bucket in sorted(os.listdir(store.root)):
        if bucket.startswith(".") or not os.path.isdir(os.path.join(store.root, bucket)):
            continue
        for _, path in store.walk(bucket, ""):
            try:
                store.hashes.get(path, os.stat(path))
            except OSError:
                pass


def main(argv=None) -> int:
    args = parse_args(argv if argv is not None else sys.argv[1:])
    try:
        server = Server((args.host, args.port), args)
    except (OSError, KeyFormatError, ValueError, ssl.SSLError) as err:
        sys.stderr.write(f"gcs_test_server: cannot start: {err}\n")
        return 1
    if args.precompute_hashes:
        precompute_hashes(server.store)
    port = server.server_address[1]
    if args.port_file:
        tmp = args.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(str(port))
        os.rename(tmp, args.port_file)
    else:
        print(f"listening on http://{args.host}:{port}", flush=True)
    if not args.quiet:
        sys.stderr.write(f"gcs_test_server: serving {args.data} on {args.host}:{port} "
                         f"(crc32c: {CRC32C.implementation})\n")
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
