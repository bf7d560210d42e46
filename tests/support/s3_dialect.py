"""s3_dialect: the S3 REST dialect of gcs_test_server, and the AWS credential
endpoints the AWS credential chain reads (STS, EC2 instance metadata, container
credentials). gcs_test_server.py routes requests here; the same data directory,
fault injection, link emulation and counters serve both dialects.

S3 ENDPOINTS (buckets are the subdirectories of --data, as for GCS)

  Addressing: path-style, /BUCKET/KEY, or virtual-hosted, "Host: BUCKET.localhost[:PORT]"
  (any host name ending in a --s3-virtual-host suffix, default "localhost"; libcurl
  resolves *.localhost to the loopback address). A path whose first segment is a GCS
  or credential route (storage, download, upload, token, computeMetadata, latest,
  _control, _aws) is never a bucket.

  GET  /?list-type=2       ListObjectsV2: prefix, delimiter, max-keys (default and at
                           most 1000), continuation-token, start-after,
                           encoding-type=url (names form-encoded, '/' kept). Items and
                           common prefixes are paged together in name order;
                           NextContinuationToken appears when IsTruncated is true.
  HEAD /KEY                Content-Length, ETag, Last-Modified; no body.
  GET  /KEY                The object; "Range: bytes=A-B" gives 206 with Content-Range,
                           an unsatisfiable range 416 InvalidRange. If-Match (a quoted
                           ETag, a list, or *) that does not match gives 412
                           PreconditionFailed; If-None-Match that matches gives 304.
  ETag                     '"' + hex MD5 of the object + '"', computed from the file
                           actually opened (so the ETag sent is that of the bytes sent).
  Errors                   <Error><Code>..</Code><Message>..</Message>...</Error> with the
                           status S3 uses (NoSuchBucket and NoSuchKey 404, AccessDenied
                           403, PreconditionFailed 412, InvalidRange 416, SlowDown 503...).
                           A HEAD answer carries no body.

AUTHENTICATION (SigV4, verified)

  A request with "Authorization: AWS4-HMAC-SHA256 ..." is verified as S3 does: the
  canonical request is rebuilt from what arrived (the path decoded and UriEncoded again,
  the query sorted, the signed headers), its signature computed with the secret of the
  access key and compared. Access keys are those given with --s3-key ID:SECRET and the
  temporary ones this server issued (STS, instance metadata, container credentials,
  POST /_control/s3/sessions). Answers:
    an unknown access key ID           403 InvalidAccessKeyId
    a wrong signature                  403 SignatureDoesNotMatch (with StringToSign and
                                       CanonicalRequest, as S3 gives them)
    a temporary key past its expiry    400 ExpiredToken
    a temporary key without its token  400 InvalidToken (or a wrong token)
    x-amz-date over 15 minutes off     403 RequestTimeTooSkewed
    a scope region other than the      400 AuthorizationHeaderMalformed with <Region> and
    bucket's (--s3-bucket-region)      x-amz-bucket-region (a HEAD: the header only)
  Unsigned requests are served unless --require-auth (then 403 AccessDenied); one to a
  bucket in another region than --s3-region gets 301 PermanentRedirect with
  x-amz-bucket-region.

CREDENTIAL ENDPOINTS (for the AWS credential chain's tests)

  POST /                   STS AssumeRoleWithWebIdentity (form body: Action, Version,
                           RoleArn, RoleSessionName, WebIdentityToken). The token must be
                           one of --sts-web-identity-token (repeatable; or those set with
                           /_control/s3/config) and the role --sts-role-arn (400
                           InvalidIdentityToken, 403 AccessDenied otherwise). Clients find
                           it through AWS_ENDPOINT_URL_STS (or AWS_ENDPOINT_URL)
                           =http://127.0.0.1:PORT.
  PUT  /latest/api/token   IMDSv2 session token (X-aws-ec2-metadata-token-ttl-seconds
                           1-21600 required).
  GET  /latest/meta-data/iam/security-credentials/       the role's name (--imds-role)
  GET  /latest/meta-data/iam/security-credentials/ROLE   its credentials (JSON)
                           Both need X-aws-ec2-metadata-token (401 without a valid one).
                           Clients find it through AWS_EC2_METADATA_SERVICE_ENDPOINT.
  GET  /_aws/container-credentials[/...]                 container credentials (JSON);
                           with --container-token, "Authorization: TOKEN" is required (403).
  Issued credentials are valid for --s3-session-lifetime seconds (default 3600).

CONTROL (besides the GCS server's)

  POST /_control/s3/sessions          {"lifetime": S}: issues temporary credentials
                                      {"access_key_id", "secret_access_key", "session_token"}
  POST /_control/s3/expire_sessions   every issued temporary credential expires now
  POST /_control/s3/config            changes, of the settings the flags give, any of
                                      {"web_identity_tokens": [T, ...] (those STS accepts from
                                      now on), "container_token": T or null, "session_lifetime": S}
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import hmac
import json
import os
import secrets
import threading
import time
import urllib.parse
import xml.sax.saxutils

S3_NS = "http://s3.amazonaws.com/doc/2006-03-01/"
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
UNSIGNED_PAYLOAD = "UNSIGNED-PAYLOAD"
MAX_KEYS = 1000
MAX_SKEW = 15 * 60
# First path segments that are never an S3 bucket (GCS and credential routes).
RESERVED_SEGMENTS = ("storage", "download", "upload", "token", "computeMetadata", "latest", "_control", "_aws")
S3_STATUS_CODES = {400: "InvalidRequest", 403: "AccessDenied", 404: "NoSuchKey", 405: "MethodNotAllowed",
                   408: "RequestTimeout", 409: "OperationAborted", 412: "PreconditionFailed",
                   416: "InvalidRange", 429: "SlowDown", 500: "InternalError", 501: "NotImplemented",
                   502: "BadGateway", 503: "SlowDown", 504: "GatewayTimeout"}


class S3Error(Exception):
    """An S3 error answer: status, code, message and extra XML fields / headers."""

    def __init__(self, status: int, code: str, message: str, fields=None, headers=None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.fields = fields or {}
        self.headers = headers or []


def uri_encode(s: str, encode_slash: bool) -> str:
    """AWS UriEncode: every byte but A-Z a-z 0-9 - . _ ~ as %XX."""
    return urllib.parse.quote(s, safe="-._~" if encode_slash else "-._~/")


def iso8601(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, tz=datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def iso8601_ms(ns: int) -> str:
    dt = datetime.datetime.fromtimestamp(ns // 1_000_000_000, tz=datetime.timezone.utc)
    return dt.strftime("%Y-%m-%dT%H:%M:%S") + f".{(ns // 1_000_000) % 1000:03d}Z"


def hmac_sha256(key: bytes, msg: str) -> bytes:
    return hmac.new(key, msg.encode("utf-8"), hashlib.sha256).digest()


def error_xml(code: str, message: str, fields: dict) -> bytes:
    esc = xml.sax.saxutils.escape
    parts = [f"<Code>{esc(code)}</Code>", f"<Message>{esc(message)}</Message>"]
    parts += [f"<{k}>{esc(str(v))}</{k}>" for k, v in fields.items()]
    parts.append(f"<RequestId>{secrets.token_hex(8).upper()}</RequestId>")
    return ('<?xml version="1.0" encoding="UTF-8"?>\n<Error>' + "".join(parts) + "</Error>").encode("utf-8")


class Sessions:
    """Temporary credentials this server issued: access key -> (secret, token, expiry).
    Thread-safe."""

    def __init__(self, lifetime: int):
        self._lock = threading.Lock()
        self._sessions: dict[str, tuple[str, str, float]] = {}
        self.lifetime = lifetime

    def issue(self, lifetime: float | None = None) -> dict:
        key = "ASIA" + secrets.token_hex(8).upper()
        secret = secrets.token_urlsafe(30)
        token = "FQoG" + secrets.token_urlsafe(48)
        expiry = time.time() + (self.lifetime if lifetime is None else lifetime)
        with self._lock:
            self._sessions[key] = (secret, token, expiry)
        return {"AccessKeyId": key, "SecretAccessKey": secret, "Token": token, "Expiration": iso8601(expiry)}

    def get(self, key: str):
        with self._lock:
            return self._sessions.get(key)

    def expire_all(self):
        with self._lock:
            now = time.time() - 1
            self._sessions = {k: (s, t, min(e, now)) for k, (s, t, e) in self._sessions.items()}


class S3Dialect:
    """The S3 side of one server: configuration, issued credentials and the IMDS
    session tokens. Thread-safe (its mutable parts are Sessions and a locked set)."""

    def __init__(self, args, file_body):
        self.file_body = file_body  # the server's FileBody: a byte range of an open file to send
        self.keys = {}
        for spec in args.s3_key or []:
            key, sep, secret = spec.partition(":")
            if not sep or not key or not secret:
                raise ValueError(f"--s3-key {spec!r}: expected ACCESS_KEY_ID:SECRET")
            self.keys[key] = secret
        self.region = args.s3_region
        self.bucket_regions = {}
        for spec in args.s3_bucket_region or []:
            bucket, sep, region = spec.partition("=")
            if not sep or not bucket or not region:
                raise ValueError(f"--s3-bucket-region {spec!r}: expected BUCKET=REGION")
            self.bucket_regions[bucket] = region
        self.virtual_hosts = [h.lower() for h in (args.s3_virtual_host or ["localhost"])]
        self.sessions = Sessions(args.s3_session_lifetime)
        self.require_auth = args.require_auth
        self._config_lock = threading.Lock()
        self._web_identity_tokens = set(args.sts_web_identity_token or [])
        self.role_arn = args.sts_role_arn
        self.imds_role = args.imds_role
        self.container_token = args.container_token
        self._imds_lock = threading.Lock()
        self._imds_tokens: dict[str, float] = {}

    def bucket_region(self, bucket: str) -> str:
        return self.bucket_regions.get(bucket, self.region)

    # -------------------------------------------------------------- routing

    def route(self, method: str, path: str, host: str, params: dict):
        """(kind, bucket, key) for requests of this dialect, or None."""
        hostname = host.rsplit(":", 1)[0].lower() if host and not host.startswith("[") else ""
        for suffix in self.virtual_hosts:
            if hostname.endswith("." + suffix):
                bucket = hostname[: -len(suffix) - 1]
                return self._object_route(method, bucket, urllib.parse.unquote(path[1:]), params)
        if path.startswith("/latest/"):
            return ("imds", None, None)
        if path == "/_aws/container-credentials" or path.startswith("/_aws/container-credentials/"):
            return ("container", None, None)
        if path == "/" and (method == "POST" or "Action" in params):
            return ("sts", None, None)
        if path == "/" or not path.startswith("/"):
            return None
        segment, _, rest = path[1:].partition("/")
        if not segment or segment in RESERVED_SEGMENTS:
            return None
        return self._object_route(method, urllib.parse.unquote(segment), urllib.parse.unquote(rest), params)

    @staticmethod
    def _object_route(method, bucket, key, params):
        if not key:
            if method == "GET" and "list-type" in params:
                return ("s3_list", bucket, None)
            return ("s3_bucket", bucket, None)
        if method == "HEAD":
            return ("s3_object", bucket, key)
        if method == "GET":
            return ("s3_media", bucket, key)
        return ("s3_bucket", bucket, key)

    # -------------------------------------------------------------- SigV4

    def verify(self, handler, method: str, bucket: str | None, body: bytes):
        """Raises S3Error unless the request is acceptably signed (or unsigned and allowed)."""
        auth = handler.headers.get("Authorization", "")
        if not auth:
            if self.require_auth:
                raise S3Error(403, "AccessDenied", "Anonymous access is not allowed (the request is not signed)")
            if bucket and self.bucket_region(bucket) != self.region:
                region = self.bucket_region(bucket)
                raise S3Error(301, "PermanentRedirect",
                              "The bucket you are attempting to access must be addressed using the specified "
                              "endpoint.", {"Bucket": bucket, "Endpoint": f"s3.{region}.amazonaws.com"},
                              [("x-amz-bucket-region", region)])
            return
        if not auth.startswith("AWS4-HMAC-SHA256 "):
            raise S3Error(400, "InvalidArgument", f"Unsupported Authorization Type: {auth.split(' ')[0]}")
        fields = {}
        for part in auth[len("AWS4-HMAC-SHA256 "):].split(","):
            name, _, value = part.strip().partition("=")
            fields[name] = value
        try:
            key_id, date, region, service, terminal = fields["Credential"].split("/")
            signed_headers = fields["SignedHeaders"].split(";")
            signature = fields["Signature"]
        except (KeyError, ValueError):
            raise S3Error(400, "AuthorizationHeaderMalformed",
                          "The authorization header is malformed; expected Credential, SignedHeaders and "
                          "Signature") from None
        amz_date = handler.headers.get("x-amz-date", "")
        try:
            when = datetime.datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=datetime.timezone.utc)
        except ValueError:
            raise S3Error(403, "AccessDenied", "AWS authentication requires a valid x-amz-date header") from None
        if abs(when.timestamp() - time.time()) > MAX_SKEW:
            raise S3Error(403, "RequestTimeTooSkewed",
                          "The difference between the request time and the current time is too large.",
                          {"RequestTime": amz_date, "ServerTime": iso8601(time.time())})
        if date != amz_date[:8] or service != "s3" or terminal != "aws4_request":
            raise S3Error(400, "AuthorizationHeaderMalformed",
                          f"The credential scope {date}/{region}/{service}/{terminal} is malformed")
        want_region = self.bucket_region(bucket) if bucket else self.region
        if region != want_region:
            raise S3Error(400, "AuthorizationHeaderMalformed",
                          f"The authorization header is malformed; the region '{region}' is wrong; "
                          f"expecting '{want_region}'", {"Region": want_region},
                          [("x-amz-bucket-region", want_region)])
        secret = self.keys.get(key_id)
        if secret is None:
            session = self.sessions.get(key_id)
            if session is None:
                raise S3Error(403, "InvalidAccessKeyId",
                              "The AWS Access Key Id you provided does not exist in our records.",
                              {"AWSAccessKeyId": key_id})
            secret, token, expiry = session
            sent = handler.headers.get("x-amz-security-token")
            if sent is None or "x-amz-security-token" not in signed_headers:
                raise S3Error(400, "InvalidToken", "The provided token is malformed or otherwise invalid.")
            if not hmac.compare_digest(sent, token):
                raise S3Error(400, "InvalidToken", "The provided token is malformed or otherwise invalid.")
            if expiry <= time.time():
                raise S3Error(400, "ExpiredToken", "The provided token has expired.")
        if "host" not in signed_headers:
            raise S3Error(400, "AuthorizationHeaderMalformed", "The host header must be signed")
        payload = handler.headers.get("x-amz-content-sha256", "")
        if not payload:
            raise S3Error(400, "InvalidRequest", "Missing required header for this request: x-amz-content-sha256")
        if payload != UNSIGNED_PAYLOAD and payload != hashlib.sha256(body).hexdigest():
            raise S3Error(400, "XAmzContentSHA256Mismatch",
                          "The provided 'x-amz-content-sha256' header does not match what was computed.")
        canonical = self.canonical_request(method, handler.path, handler.headers, signed_headers, payload)
        scope = f"{date}/{region}/{service}/{terminal}"
        string_to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope,
                                    hashlib.sha256(canonical.encode("utf-8")).hexdigest()])
        k = hmac_sha256(("AWS4" + secret).encode("utf-8"), date)
        k = hmac_sha256(k, region)
        k = hmac_sha256(k, service)
        k = hmac_sha256(k, "aws4_request")
        expected = hmac.new(k, string_to_sign.encode("utf-8"), hashlib.sha256).hexdigest()
        if not hmac.compare_digest(expected, signature):
            raise S3Error(403, "SignatureDoesNotMatch",
                          "The request signature we calculated does not match the signature you provided. "
                          "Check your key and signing method.",
                          {"AWSAccessKeyId": key_id, "StringToSign": string_to_sign,
                           "CanonicalRequest": canonical})
        handler.server.stats.tally("s3_signers", key_id)

    @staticmethod
    def canonical_request(method: str, target: str, headers, signed_headers: list, payload: str) -> str:
        raw_path, _, raw_query = target.partition("?")
        path = uri_encode(urllib.parse.unquote(raw_path), encode_slash=False) or "/"
        pairs = []
        for item in raw_query.split("&") if raw_query else []:
            name, _, value = item.partition("=")
            pairs.append((uri_encode(urllib.parse.unquote(name), True), uri_encode(urllib.parse.unquote(value), True)))
        query = "&".join(f"{n}={v}" for n, v in sorted(pairs))
        lines = []
        for name in signed_headers:
            values = headers.get_all(name) or []
            lines.append(name + ":" + ",".join(" ".join(v.split()) for v in values))
        return "\n".join([method, path, query, "\n".join(lines) + "\n", ";".join(signed_headers), payload])

    # -------------------------------------------------------------- responses

    def send_error(self, handler, err: S3Error, head_only: bool = False):
        headers = [("Content-Type", "application/xml"), ("x-amz-request-id", secrets.token_hex(8).upper()),
                   *err.headers]
        body = error_xml(err.code, err.message, err.fields)
        if head_only:
            handler._send(err.status, headers, body, head_only=True)
        else:
            handler._send(err.status, headers, body)

    def send_fault_status(self, handler, status: int, head_only: bool):
        code = S3_STATUS_CODES.get(status, "InternalError")
        message = "Please reduce your request rate." if code == "SlowDown" else f"Injected fault: HTTP {status}"
        self.send_error(handler, S3Error(status, code, message), head_only)

    # -------------------------------------------------------------- endpoints

    def handle(self, handler, kind: str, bucket, key, method: str, params: dict, body: bytes):
        head_only = method == "HEAD"
        try:
            if kind in ("s3_list", "s3_object", "s3_media", "s3_bucket"):
                store = handler.server.store
                try:
                    store.bucket_dir(bucket)
                except Exception:  # noqa: BLE001 - the GCS side raises its own HttpError
                    raise S3Error(404, "NoSuchBucket", "The specified bucket does not exist",
                                  {"BucketName": bucket}) from None
                self.verify(handler, method, bucket, body)
                handler.server.stats.tally("s3_user_agents", handler.headers.get("User-Agent", ""))
                if kind == "s3_list":
                    self._list(handler, bucket, params)
                elif kind in ("s3_object", "s3_media"):
                    self._object(handler, bucket, key, head_only)
                else:
                    raise S3Error(501, "NotImplemented",
                                  f"{method} of this resource is not implemented by this server")
            elif kind == "sts":
                self._sts(handler, method, params, body)
            elif kind == "imds":
                self._imds(handler, method)
            elif kind == "container":
                self._container(handler, method)
        except S3Error as err:
            self.send_error(handler, err, head_only)

    def _list(self, handler, bucket, params):
        if params.get("list-type") != "2":
            raise S3Error(400, "InvalidArgument", "Only ListObjectsV2 (list-type=2) is supported by this server")
        try:
            max_keys = int(params.get("max-keys", MAX_KEYS))
        except ValueError:
            raise S3Error(400, "InvalidArgument", "max-keys is not a number") from None
        max_keys = MAX_KEYS if max_keys < 1 or max_keys > MAX_KEYS else max_keys
        prefix = params.get("prefix", "")
        delimiter = params.get("delimiter", "")
        token = params.get("continuation-token", "")
        start_after = params.get("start-after", "")
        if not token and start_after:
            token = base64.urlsafe_b64encode(start_after.encode("utf-8")).decode()
        store = handler.server.store
        try:
            items, prefixes, next_token = store.list(bucket, prefix, delimiter, "", "", token, max_keys)
        except Exception as err:  # an invalid token (the GCS side's HttpError)
            raise S3Error(400, "InvalidArgument", f"The continuation token provided is incorrect: {err}") from None
        url = params.get("encoding-type") == "url"

        def name(s: str) -> str:
            return xml.sax.saxutils.escape(urllib.parse.quote_plus(s, safe="/") if url else s)

        out = [f'<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult xmlns="{S3_NS}">',
               f"<Name>{xml.sax.saxutils.escape(bucket)}</Name><Prefix>{name(prefix)}</Prefix>"]
        if delimiter:
            out.append(f"<Delimiter>{name(delimiter)}</Delimiter>")
        out.append(f"<MaxKeys>{max_keys}</MaxKeys>")
        if url:
            out.append("<EncodingType>url</EncodingType>")
        if params.get("continuation-token"):
            out.append(f"<ContinuationToken>{xml.sax.saxutils.escape(params['continuation-token'])}"
                       "</ContinuationToken>")
        count = 0
        for key, path in items:
            try:
                st = os.stat(path)
                etag = self.etag(store, path, st)
            except OSError:
                continue  # deleted since the walk
            count += 1
            out.append(f"<Contents><Key>{name(key)}</Key><LastModified>{iso8601_ms(max(st.st_mtime_ns, 1))}"
                       f"</LastModified><ETag>&quot;{etag}&quot;</ETag><Size>{st.st_size}</Size>"
                       "<StorageClass>STANDARD</StorageClass></Contents>")
        for p in prefixes:
            count += 1
            out.append(f"<CommonPrefixes><Prefix>{name(p)}</Prefix></CommonPrefixes>")
        out.append(f"<KeyCount>{count}</KeyCount><IsTruncated>{'true' if next_token else 'false'}</IsTruncated>")
        if next_token:
            out.append(f"<NextContinuationToken>{next_token}</NextContinuationToken>")
        out.append("</ListBucketResult>")
        handler._send(200, [("Content-Type", "application/xml")], "".join(out).encode("utf-8"))

    @staticmethod
    def etag(store, path: str, st, source: str | None = None) -> str:
        md5_b64, _ = store.hashes.get(path, st, source)
        return base64.b64decode(md5_b64).hex()

    @staticmethod
    def _etag_matches(header: str, etag: str) -> bool:
        for candidate in header.split(","):
            candidate = candidate.strip()
            if candidate.startswith("W/"):
                candidate = candidate[2:]
            if candidate == "*" or candidate.strip('"') == etag:
                return True
        return False

    def _object(self, handler, bucket, key, head_only: bool):
        store = handler.server.store
        try:
            path = store.object_path(bucket, key)
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except Exception:  # noqa: BLE001 - missing, an impossible name (the GCS side's HttpError)
            raise S3Error(404, "NoSuchKey", "The specified key does not exist.", {"Key": key}) from None
        try:
            st = os.fstat(fd)  # the version whose bytes are sent
            if not os.path.isfile(f"/proc/self/fd/{fd}"):
                raise S3Error(404, "NoSuchKey", "The specified key does not exist.", {"Key": key})
            etag = self.etag(store, path, st, f"/proc/self/fd/{fd}")
            size = st.st_size
            headers = [("Content-Type", "application/octet-stream"), ("Accept-Ranges", "bytes"),
                       ("ETag", f'"{etag}"'), ("Last-Modified", handler.date_time_string(st.st_mtime)),
                       ("x-amz-request-id", secrets.token_hex(8).upper())]
            if_match = handler.headers.get("If-Match")
            if if_match is not None and not self._etag_matches(if_match, etag):
                raise S3Error(412, "PreconditionFailed", "At least one of the pre-conditions you specified did not "
                                                         "hold", {"Condition": "If-Match"})
            if_none = handler.headers.get("If-None-Match")
            if if_none is not None and self._etag_matches(if_none, etag):
                handler._send(304, headers, b"")
                return
            rng = handler._parse_range(handler.headers.get("Range"), size) if not head_only else None
            if rng == "unsatisfiable":
                raise S3Error(416, "InvalidRange", "The requested range is not satisfiable",
                              {"RangeRequested": handler.headers.get("Range"), "ActualObjectSize": size},
                              [("Content-Range", f"bytes */{size}")])
            if rng is None:
                code, offset, length = 200, 0, size
            else:
                code, (offset, length) = 206, rng
                headers.append(("Content-Range", f"bytes {offset}-{offset + length - 1}/{size}"))
            if head_only:
                handler._send(200, headers, self.file_body(fd, 0, size), head_only=True)
                return
            handler.server.stats.range(offset, length, key)
            handler._send(code, headers, self.file_body(fd, offset, length))
        finally:
            os.close(fd)

    # -------------------------------------------------------------- credentials

    def _send_json(self, handler, code: int, obj):
        handler._send(code, [("Content-Type", "application/json")], json.dumps(obj).encode("utf-8"))

    def _sts(self, handler, method, params, body):
        form = dict(params)
        if method == "POST":
            form.update(urllib.parse.parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))
        handler.server.stats.add("sts_requests")

        def fail(status, code, message):
            esc = xml.sax.saxutils.escape
            xml_body = (f'<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><Error><Type>Sender</Type>'
                        f"<Code>{esc(code)}</Code><Message>{esc(message)}</Message></Error>"
                        f"<RequestId>{secrets.token_hex(8)}</RequestId></ErrorResponse>")
            handler._send(status, [("Content-Type", "text/xml")], xml_body.encode("utf-8"))

        if form.get("Action") != "AssumeRoleWithWebIdentity":
            return fail(400, "InvalidAction", f"Could not find operation {form.get('Action')!r}")
        token = form.get("WebIdentityToken", "")
        handler.server.stats.tally("sts_web_identity_tokens", token)
        with self._config_lock:
            accepted = token in self._web_identity_tokens
        if not accepted:
            return fail(400, "InvalidIdentityToken", "The web identity token that was passed could not be validated")
        if form.get("RoleArn") != self.role_arn:
            return fail(403, "AccessDenied", "Not authorized to perform sts:AssumeRoleWithWebIdentity")
        if not form.get("RoleSessionName"):
            return fail(400, "ValidationError", "RoleSessionName is required")
        c = self.sessions.issue()
        handler.server.stats.add("token_requests")
        handler.server.stats.sts_issued(c["AccessKeyId"], token)
        xml_body = (
            '<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">'
            "<AssumeRoleWithWebIdentityResult><Credentials>"
            f"<AccessKeyId>{c['AccessKeyId']}</AccessKeyId><SecretAccessKey>{c['SecretAccessKey']}</SecretAccessKey>"
            f"<SessionToken>{c['Token']}</SessionToken><Expiration>{c['Expiration']}</Expiration>"
            "</Credentials>"
            f"<AssumedRoleUser><Arn>{xml.sax.saxutils.escape(self.role_arn or '')}/"
            f"{xml.sax.saxutils.escape(form['RoleSessionName'])}</Arn></AssumedRoleUser>"
            "</AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>")
        handler._send(200, [("Content-Type", "text/xml")], xml_body.encode("utf-8"))

    def _imds(self, handler, method):
        handler.server.stats.add("imds_requests")
        path = handler.path.partition("?")[0]
        if path == "/latest/api/token":
            if method != "PUT":
                return handler._send_text(405, "Method Not Allowed\n")
            try:
                ttl = int(handler.headers.get("X-aws-ec2-metadata-token-ttl-seconds", ""))
            except ValueError:
                ttl = 0
            if not 1 <= ttl <= 21600:
                return handler._send_text(400, "Bad Request: X-aws-ec2-metadata-token-ttl-seconds 1-21600\n")
            token = "imds-" + secrets.token_urlsafe(24)
            with self._imds_lock:
                self._imds_tokens[token] = time.time() + ttl
            return handler._send_text(200, token, [("X-aws-ec2-metadata-token-ttl-seconds", str(ttl))])
        token = handler.headers.get("X-aws-ec2-metadata-token", "")
        with self._imds_lock:
            valid = self._imds_tokens.get(token, 0) > time.time()
        if not valid:
            return handler._send_text(401, "Unauthorized\n")
        base = "/latest/meta-data/iam/security-credentials/"
        if path == base:
            return handler._send_text(200, self.imds_role)
        if path == base + self.imds_role:
            c = self.sessions.issue()
            handler.server.stats.add("token_requests")
            return self._send_json(handler, 200, {"Code": "Success", "LastUpdated": iso8601(time.time()),
                                                  "Type": "AWS-HMAC", **c})
        return handler._send_text(404, "Not Found\n")

    def _container(self, handler, method):
        handler.server.stats.add("container_credentials_requests")
        if method != "GET":
            return self._send_json(handler, 405, {"code": "MethodNotAllowed", "message": "GET only"})
        with self._config_lock:
            want = self.container_token
        if want is not None and handler.headers.get("Authorization") != want:
            return self._send_json(handler, 403, {"code": "AccessDeniedException",
                                                  "message": "the Authorization header is missing or wrong"})
        c = self.sessions.issue()
        handler.server.stats.add("token_requests")
        self._send_json(handler, 200, {**c, "RoleArn": self.role_arn or "arn:aws:iam::123456789012:role/test"})

    # -------------------------------------------------------------- control

    def control(self, handler, method, path, payload) -> bool:
        """Serves /_control/s3/...; False if the path is not one of them."""
        if path == "/_control/s3/sessions" and method == "POST":
            lifetime = (payload or {}).get("lifetime") if isinstance(payload, dict) else None
            if lifetime is not None and (isinstance(lifetime, bool) or not isinstance(lifetime, (int, float))):
                raise ValueError("lifetime must be a number of seconds")
            c = self.sessions.issue(lifetime)
            handler._send_json(200, {"access_key_id": c["AccessKeyId"], "secret_access_key": c["SecretAccessKey"],
                                     "session_token": c["Token"], "expiration": c["Expiration"]})
            return True
        if path == "/_control/s3/config" and method == "POST":
            if not isinstance(payload, dict):
                raise ValueError("body must be a JSON object")
            unknown = set(payload) - {"web_identity_tokens", "container_token", "session_lifetime"}
            if unknown:
                raise ValueError(f"unknown settings {sorted(unknown)}")
            tokens = payload.get("web_identity_tokens")
            if tokens is not None and (not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens)):
                raise ValueError("web_identity_tokens must be a list of strings")
            lifetime = payload.get("session_lifetime")
            if lifetime is not None and (isinstance(lifetime, bool) or not isinstance(lifetime, (int, float))):
                raise ValueError("session_lifetime must be a number of seconds")
            with self._config_lock:
                if tokens is not None:
                    self._web_identity_tokens = set(tokens)
                if "container_token" in payload:
                    self.container_token = payload["container_token"]
                if lifetime is not None:
                    self.sessions.lifetime = lifetime
            handler._send_json(200, {"ok": True})
            return True
        if path == "/_control/s3/expire_sessions" and method == "POST":
            self.sessions.expire_all()
            handler._send_json(200, {"ok": True})
            return True
        return False


def add_arguments(p):
    """The S3 dialect's command-line flags."""
    p.add_argument("--s3-key", action="append", metavar="ID:SECRET",
                   help="an access key the S3 side accepts (repeatable)")
    p.add_argument("--s3-region", default="us-east-1", help="the region of every bucket (default us-east-1)")
    p.add_argument("--s3-bucket-region", action="append", metavar="BUCKET=REGION",
                   help="one bucket's region (repeatable)")
    p.add_argument("--s3-virtual-host", action="append", metavar="SUFFIX",
                   help="host names BUCKET.SUFFIX are virtual-hosted requests (default: localhost)")
    p.add_argument("--s3-session-lifetime", type=int, default=3600,
                   help="seconds issued temporary credentials are valid (default 3600)")
    p.add_argument("--sts-web-identity-token", action="append",
                   help="a web identity token STS accepts (repeatable)")
    p.add_argument("--sts-role-arn", default="arn:aws:iam::123456789012:role/tensorfs-test",
                   help="the role STS lets that token assume")
    p.add_argument("--imds-role", default="tensorfs-test-role", help="the instance role instance metadata names")
    p.add_argument("--container-token", help="the Authorization value container credentials require")
