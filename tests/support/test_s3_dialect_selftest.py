#!/usr/bin/python3
"""Self-test of the S3 dialect of tests/support/gcs_test_server.py (s3_dialect.py):
starts the server on a temporary directory and checks the contract tensorfs's S3
tests rely on: ListObjectsV2 pages, HEAD, ranged GET, ETag and If-Match, both
addressing styles, XML errors, SigV4 verification (wrong secret, unknown key,
expired and missing session tokens, wrong region, skewed clock), the STS,
instance-metadata and container-credentials endpoints, and the GCS side's faults
and counters applied to S3 requests.

The requests are signed by a SigV4 implementation of this file, itself checked
first against AWS's published example (GET Object with a Range header).

Run: /usr/bin/python3 tests/support/test_s3_dialect_selftest.py [-v]
"""

import datetime
import hashlib
import hmac
import json
import os
import shutil
import sys
import tempfile
import time
import unittest
import urllib.parse
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from test_gcs_server_selftest import ServerProcess, read  # noqa: E402

KEY_ID, SECRET = "AKIDSELFTEST", "selftest/secret+key"
ODD_NAMES = ["with space.bin", "ünïcödé/名前.bin", "plus+sign.bin", "tilde~.bin", "amp&lt;.bin", "q?x#y.bin"]
NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"
WEB_IDENTITY_TOKEN = "eyJ.web-identity.token"
ROLE_ARN = "arn:aws:iam::123456789012:role/selftest"
CONTAINER_TOKEN = "container-token-1"


def uri_encode(s: str, encode_slash: bool) -> str:
    return urllib.parse.quote(s, safe="-._~" if encode_slash else "-._~/")


def sign(method, host, path, query, headers, key_id, secret, region="us-east-1", when=None,
         payload="UNSIGNED-PAYLOAD", session_token=None):
    """Headers (with Authorization) for a SigV4-signed request. `path` is the key path,
    not encoded; `query` a list of (name, value), not encoded."""
    when = when or datetime.datetime.now(datetime.timezone.utc)
    amz_date = when.strftime("%Y%m%dT%H%M%SZ")
    out = dict(headers)
    out["x-amz-date"] = amz_date
    out["x-amz-content-sha256"] = payload
    if session_token:
        out["x-amz-security-token"] = session_token
    signed = {k.lower(): " ".join(str(v).split()) for k, v in out.items()}
    signed["host"] = host
    names = sorted(signed)
    canonical_query = "&".join(f"{uri_encode(n, True)}={uri_encode(v, True)}" for n, v in
                               sorted((n, v) for n, v in query))
    canonical = "\n".join([method, uri_encode(path, False) or "/", canonical_query,
                           "".join(f"{n}:{signed[n]}\n" for n in names), ";".join(names), payload])
    scope = f"{amz_date[:8]}/{region}/s3/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    k = ("AWS4" + secret).encode()
    for part in (amz_date[:8], region, "s3", "aws4_request"):
        k = hmac.new(k, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(k, to_sign.encode(), hashlib.sha256).hexdigest()
    out["Authorization"] = (f"AWS4-HMAC-SHA256 Credential={key_id}/{scope},SignedHeaders={';'.join(names)},"
                            f"Signature={signature}")
    return out


class Env:
    tmp = None
    data = None
    server: ServerProcess = None


def setUpModule():
    Env.tmp = tempfile.mkdtemp(prefix="s3_selftest.")
    data = Env.data = os.path.join(Env.tmp, "data")
    many = os.path.join(data, "many")
    os.makedirs(many)
    for i in range(1500):
        with open(os.path.join(many, f"obj-{i:05d}"), "wb") as f:
            f.write(b"x")
    for name in ["a/1", "a/2", "a/b/3", "c"]:
        path = os.path.join(data, "tree", *name.split("/"))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(name.encode())
    for name in ODD_NAMES:
        path = os.path.join(data, "odd", *name.split("/"))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(("content of " + name).encode())
    os.makedirs(os.path.join(data, "objs"))
    with open(os.path.join(data, "objs", "blob.bin"), "wb") as f:
        f.write(os.urandom(1 << 20))
    os.makedirs(os.path.join(data, "westbucket"))
    with open(os.path.join(data, "westbucket", "k"), "wb") as f:
        f.write(b"west")
    Env.server = ServerProcess(data, "--s3-key", f"{KEY_ID}:{SECRET}", "--s3-bucket-region", "westbucket=eu-west-1",
                               "--sts-web-identity-token", WEB_IDENTITY_TOKEN, "--sts-role-arn", ROLE_ARN,
                               "--container-token", CONTAINER_TOKEN)


def tearDownModule():
    if Env.server:
        Env.server.stop()
    shutil.rmtree(Env.tmp, ignore_errors=True)


class S3Test(unittest.TestCase):
    def setUp(self):
        self.s = Env.server
        self.s.control("DELETE", "/_control/faults")
        deadline = time.monotonic() + 60  # only a hung response takes this long
        while self.s.json("GET", "/_control/stats")["requests_in_progress"] != 0:
            self.assertLess(time.monotonic(), deadline, "a request still in progress after 60 s")
            time.sleep(0.01)
        self.s.control("POST", "/_control/stats/reset")

    @property
    def host(self):
        return f"127.0.0.1:{self.s.port}"

    def s3(self, method, bucket, key="", query=(), headers=None, key_id=KEY_ID, secret=SECRET, virtual=False,
           signed=True, **sign_args):
        """(status, headers, body) of an S3 request, path-style or virtual-hosted."""
        host = f"{bucket}.localhost:{self.s.port}" if virtual else self.host
        path = "/" + key if virtual else f"/{bucket}" + ("/" + key if key else "")
        hdrs = dict(headers or {})
        if signed:
            hdrs = sign(method, host, path, list(query), hdrs, key_id, secret, **sign_args)
        hdrs["Host"] = host
        target = uri_encode(path, False)
        if query:
            target += "?" + "&".join(f"{uri_encode(n, True)}={uri_encode(v, True)}" for n, v in query)
        return self.s.request(method, target, headers=hdrs)

    def error_code(self, body):
        root = ET.fromstring(body)
        self.assertEqual(root.tag, "Error")
        return root.findtext("Code")

    def list_all(self, bucket, **params):
        keys, prefixes, pages, token = [], [], 0, None
        while True:
            q = [("list-type", "2")] + [(k.replace("_", "-"), v) for k, v in params.items()]
            if token:
                q.append(("continuation-token", token))
            status, _, body = self.s3("GET", bucket, query=q)
            self.assertEqual(status, 200, body[:300])
            root = ET.fromstring(body)
            url = root.findtext(NS + "EncodingType") == "url"

            def name(s):
                return urllib.parse.unquote_plus(s) if url else s

            keys += [name(c.findtext(NS + "Key")) for c in root.findall(NS + "Contents")]
            prefixes += [name(p.findtext(NS + "Prefix")) for p in root.findall(NS + "CommonPrefixes")]
            pages += 1
            if root.findtext(NS + "IsTruncated") != "true":
                self.assertIsNone(root.find(NS + "NextContinuationToken"))
                return keys, prefixes, pages
            token = root.findtext(NS + "NextContinuationToken")
            self.assertTrue(token)


class SignerTest(unittest.TestCase):
    def test_signer_matches_the_aws_published_example(self):
        when = datetime.datetime(2013, 5, 24, tzinfo=datetime.timezone.utc)
        h = sign("GET", "examplebucket.s3.amazonaws.com", "/test.txt", [], {"Range": "bytes=0-9"},
                 "AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", when=when,
                 payload=hashlib.sha256(b"").hexdigest())
        self.assertTrue(h["Authorization"].endswith(
            "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"), h["Authorization"])


class ListingTest(S3Test):
    def test_pages_over_1000_objects_follow_continuation_tokens(self):
        keys, _, pages = self.list_all("many")
        self.assertEqual(len(keys), 1500)
        self.assertEqual(keys, sorted(keys))
        self.assertEqual(pages, 2)

    def test_max_keys_and_prefix(self):
        keys, _, pages = self.list_all("many", prefix="obj-0001", max_keys="4")
        self.assertEqual(len(keys), 10)
        self.assertEqual(pages, 3)

    def test_delimiter_gives_common_prefixes(self):
        keys, prefixes, _ = self.list_all("tree", delimiter="/")
        self.assertEqual((keys, prefixes), (["c"], ["a/"]))
        keys, prefixes, _ = self.list_all("tree", prefix="a/", delimiter="/")
        self.assertEqual((keys, prefixes), (["a/1", "a/2"], ["a/b/"]))

    def test_url_encoded_names_decode_to_the_keys(self):
        keys, _, _ = self.list_all("odd", encoding_type="url")
        self.assertEqual(sorted(keys), sorted(ODD_NAMES))
        keys, _, _ = self.list_all("odd")
        self.assertEqual(sorted(keys), sorted(ODD_NAMES))

    def test_listed_etag_and_size(self):
        status, _, body = self.s3("GET", "objs", query=[("list-type", "2")])
        contents = ET.fromstring(body).find(NS + "Contents")
        data = read(os.path.join(Env.data, "objs", "blob.bin"))
        self.assertEqual(contents.findtext(NS + "ETag"), '"' + hashlib.md5(data).hexdigest() + '"')
        self.assertEqual(int(contents.findtext(NS + "Size")), len(data))

    def test_virtual_hosted_listing(self):
        status, _, body = self.s3("GET", "tree", query=[("list-type", "2"), ("prefix", "a/b")], virtual=True)
        self.assertEqual(status, 200, body)
        self.assertEqual([c.findtext(NS + "Key") for c in ET.fromstring(body).findall(NS + "Contents")], ["a/b/3"])

    def test_missing_bucket_is_no_such_bucket(self):
        status, headers, body = self.s3("GET", "nosuchbucket", query=[("list-type", "2")])
        self.assertEqual(status, 404)
        self.assertEqual(headers["content-type"], "application/xml")
        self.assertEqual(self.error_code(body), "NoSuchBucket")


class ObjectTest(S3Test):
    def blob(self):
        return read(os.path.join(Env.data, "objs", "blob.bin"))

    def test_head_gives_length_etag_and_no_body(self):
        status, headers, body = self.s3("HEAD", "objs", "blob.bin")
        self.assertEqual(status, 200)
        self.assertEqual(int(headers["content-length"]), 1 << 20)
        self.assertEqual(headers["etag"], '"' + hashlib.md5(self.blob()).hexdigest() + '"')
        self.assertIn("last-modified", headers)
        self.assertEqual(body, b"")

    def test_ranged_get_both_addressing_styles(self):
        for virtual in (False, True):
            status, headers, body = self.s3("GET", "objs", "blob.bin", headers={"Range": "bytes=1000-1999"},
                                            virtual=virtual)
            self.assertEqual(status, 206)
            self.assertEqual(headers["content-range"], f"bytes 1000-1999/{1 << 20}")
            self.assertEqual(body, self.blob()[1000:2000])

    def test_if_match_pins_the_version(self):
        etag = '"' + hashlib.md5(self.blob()).hexdigest() + '"'
        status, _, body = self.s3("GET", "objs", "blob.bin", headers={"Range": "bytes=0-9", "If-Match": etag})
        self.assertEqual((status, body), (206, self.blob()[:10]))
        status, _, body = self.s3("GET", "objs", "blob.bin", headers={"Range": "bytes=0-9", "If-Match": '"0abc"'})
        self.assertEqual(status, 412)
        self.assertEqual(self.error_code(body), "PreconditionFailed")
        status, _, _ = self.s3("GET", "objs", "blob.bin", headers={"If-None-Match": etag})
        self.assertEqual(status, 304)

    def test_odd_keys_round_trip(self):
        for name in ODD_NAMES:
            status, _, body = self.s3("GET", "odd", name)
            self.assertEqual((status, body), (200, ("content of " + name).encode()), name)

    def test_unsatisfiable_range_and_missing_key(self):
        status, headers, body = self.s3("GET", "objs", "blob.bin", headers={"Range": f"bytes={1 << 20}-"})
        self.assertEqual(status, 416)
        self.assertEqual(self.error_code(body), "InvalidRange")
        status, _, body = self.s3("GET", "objs", "nope")
        self.assertEqual((status, self.error_code(body)), (404, "NoSuchKey"))
        status, _, body = self.s3("HEAD", "objs", "nope")
        self.assertEqual((status, body), (404, b""))

    def test_replaced_object_gets_a_new_etag(self):
        path = os.path.join(Env.data, "objs", "replaced")
        with open(path, "wb") as f:
            f.write(b"old")
        old = self.s3("HEAD", "objs", "replaced")[1]["etag"]
        with open(path + ".tmp", "wb") as f:
            f.write(b"new")
        os.rename(path + ".tmp", path)
        status, _, _ = self.s3("GET", "objs", "replaced", headers={"If-Match": old})
        self.assertEqual(status, 412)
        self.assertNotEqual(self.s3("HEAD", "objs", "replaced")[1]["etag"], old)


class SignatureTest(S3Test):
    def test_wrong_secret_is_signature_does_not_match(self):
        status, _, body = self.s3("GET", "tree", query=[("list-type", "2")], secret="wrong")
        self.assertEqual(status, 403)
        root = ET.fromstring(body)
        self.assertEqual(root.findtext("Code"), "SignatureDoesNotMatch")
        self.assertIn("list-type=2", root.findtext("CanonicalRequest"))

    def test_unknown_key_is_invalid_access_key_id(self):
        status, _, body = self.s3("GET", "tree", query=[("list-type", "2")], key_id="AKIDUNKNOWN")
        self.assertEqual((status, self.error_code(body)), (403, "InvalidAccessKeyId"))

    def test_a_changed_header_breaks_the_signature(self):
        host = self.host
        headers = sign("GET", host, "/objs/blob.bin", [], {"Range": "bytes=0-9"}, KEY_ID, SECRET)
        headers["Range"] = "bytes=0-99"
        headers["Host"] = host
        status, _, body = self.s.request("GET", "/objs/blob.bin", headers=headers)
        self.assertEqual((status, self.error_code(body)), (403, "SignatureDoesNotMatch"))

    def test_session_credentials_and_their_expiry(self):
        c = self.s.control("POST", "/_control/s3/sessions", {"lifetime": 600})
        ok = self.s3("GET", "tree", query=[("list-type", "2")], key_id=c["access_key_id"],
                     secret=c["secret_access_key"], session_token=c["session_token"])
        self.assertEqual(ok[0], 200)
        status, _, body = self.s3("GET", "tree", query=[("list-type", "2")], key_id=c["access_key_id"],
                                  secret=c["secret_access_key"])
        self.assertEqual((status, self.error_code(body)), (400, "InvalidToken"))
        self.s.control("POST", "/_control/s3/expire_sessions")
        status, _, body = self.s3("GET", "tree", query=[("list-type", "2")], key_id=c["access_key_id"],
                                  secret=c["secret_access_key"], session_token=c["session_token"])
        self.assertEqual((status, self.error_code(body)), (400, "ExpiredToken"))

    def test_wrong_region_names_the_bucket_region(self):
        status, headers, body = self.s3("GET", "westbucket", query=[("list-type", "2")])
        self.assertEqual(status, 400)
        root = ET.fromstring(body)
        self.assertEqual((root.findtext("Code"), root.findtext("Region")), ("AuthorizationHeaderMalformed", "eu-west-1"))
        self.assertEqual(headers["x-amz-bucket-region"], "eu-west-1")
        status, headers, body = self.s3("HEAD", "westbucket", "k")
        self.assertEqual((status, headers["x-amz-bucket-region"], body), (400, "eu-west-1", b""))
        status, _, body = self.s3("GET", "westbucket", "k", region="eu-west-1")
        self.assertEqual((status, body), (200, b"west"))

    def test_unsigned_request_to_another_region_is_redirected(self):
        status, headers, body = self.s3("GET", "westbucket", "k", signed=False)
        self.assertEqual((status, self.error_code(body)), (301, "PermanentRedirect"))
        self.assertEqual(headers["x-amz-bucket-region"], "eu-west-1")

    def test_skewed_clock_is_refused(self):
        when = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(hours=1)
        status, _, body = self.s3("GET", "tree", query=[("list-type", "2")], when=when)
        self.assertEqual((status, self.error_code(body)), (403, "RequestTimeTooSkewed"))

    def test_unsigned_requests_are_served_without_require_auth(self):
        status, _, body = self.s3("GET", "tree", "c", signed=False)
        self.assertEqual((status, body), (200, b"c"))

    def test_unsigned_requests_are_denied_with_require_auth(self):
        server = ServerProcess(Env.data, "--require-auth", "--s3-key", f"{KEY_ID}:{SECRET}")
        try:
            status, _, body = server.request("GET", "/tree/c")
            self.assertEqual((status, self.error_code(body)), (403, "AccessDenied"))
            host = f"127.0.0.1:{server.port}"
            headers = sign("GET", host, "/tree/c", [], {}, KEY_ID, SECRET)
            headers["Host"] = host
            self.assertEqual(server.request("GET", "/tree/c", headers=headers)[:3:2], (200, b"c"))
        finally:
            server.stop()


class CredentialEndpointTest(S3Test):
    def test_sts_assume_role_with_web_identity(self):
        form = urllib.parse.urlencode({"Action": "AssumeRoleWithWebIdentity", "Version": "2011-06-15",
                                       "RoleArn": ROLE_ARN, "RoleSessionName": "s",
                                       "WebIdentityToken": WEB_IDENTITY_TOKEN}).encode()
        status, _, body = self.s.request("POST", "/", form, {"Content-Type": "application/x-www-form-urlencoded"})
        self.assertEqual(status, 200, body)
        ns = "{https://sts.amazonaws.com/doc/2011-06-15/}"
        creds = ET.fromstring(body).find(f"{ns}AssumeRoleWithWebIdentityResult/{ns}Credentials")
        key, secret, token = (creds.findtext(ns + n) for n in ("AccessKeyId", "SecretAccessKey", "SessionToken"))
        self.assertEqual(self.s3("GET", "tree", "c", key_id=key, secret=secret, session_token=token)[2], b"c")
        bad = form.replace(WEB_IDENTITY_TOKEN.encode(), b"forged")
        status, _, body = self.s.request("POST", "/", bad, {"Content-Type": "application/x-www-form-urlencoded"})
        self.assertEqual(status, 400)
        self.assertIn(b"InvalidIdentityToken", body)
        self.assertEqual(self.s.json("GET", "/_control/stats")["sts_requests"], 2)

    def test_sts_tokens_and_container_token_can_be_changed(self):
        def assume(token):
            form = urllib.parse.urlencode({"Action": "AssumeRoleWithWebIdentity", "Version": "2011-06-15",
                                           "RoleArn": ROLE_ARN, "RoleSessionName": "s",
                                           "WebIdentityToken": token}).encode()
            return self.s.request("POST", "/", form, {"Content-Type": "application/x-www-form-urlencoded"})
        try:
            self.s.control("POST", "/_control/s3/config", {"web_identity_tokens": ["rotated"],
                                                           "container_token": "container-token-2"})
            self.assertEqual(assume(WEB_IDENTITY_TOKEN)[0], 400, "the old token is refused")
            status, _, body = assume("rotated")
            self.assertEqual(status, 200, body)
            ns = "{https://sts.amazonaws.com/doc/2011-06-15/}"
            key = ET.fromstring(body).findtext(f"{ns}AssumeRoleWithWebIdentityResult/{ns}Credentials/{ns}AccessKeyId")
            stats = self.s.json("GET", "/_control/stats")
            self.assertEqual(stats["sts_web_identity_tokens"], {WEB_IDENTITY_TOKEN: 1, "rotated": 1})
            self.assertEqual(stats["sts_issued"], {key: "rotated"})
            status, _, _ = self.s.request("GET", "/_aws/container-credentials",
                                          headers={"Authorization": CONTAINER_TOKEN})
            self.assertEqual(status, 403)
            status, _, _ = self.s.request("GET", "/_aws/container-credentials",
                                          headers={"Authorization": "container-token-2"})
            self.assertEqual(status, 200)
        finally:
            self.s.control("POST", "/_control/s3/config", {"web_identity_tokens": [WEB_IDENTITY_TOKEN],
                                                           "container_token": CONTAINER_TOKEN})

    def test_instance_metadata_v2(self):
        status, _, _ = self.s.request("GET", "/latest/meta-data/iam/security-credentials/")
        self.assertEqual(status, 401)
        status, _, token = self.s.request("PUT", "/latest/api/token", b"",
                                          {"X-aws-ec2-metadata-token-ttl-seconds": "21600"})
        self.assertEqual(status, 200)
        auth = {"X-aws-ec2-metadata-token": token.decode()}
        status, _, role = self.s.request("GET", "/latest/meta-data/iam/security-credentials/", headers=auth)
        self.assertEqual((status, role), (200, b"tensorfs-test-role"))
        status, _, body = self.s.request("GET", "/latest/meta-data/iam/security-credentials/" + role.decode(),
                                         headers=auth)
        c = json.loads(body)
        self.assertEqual(c["Code"], "Success")
        self.assertEqual(self.s3("GET", "tree", "c", key_id=c["AccessKeyId"], secret=c["SecretAccessKey"],
                                 session_token=c["Token"])[2], b"c")

    def test_container_credentials_need_the_token(self):
        status, _, _ = self.s.request("GET", "/_aws/container-credentials")
        self.assertEqual(status, 403)
        status, _, body = self.s.request("GET", "/_aws/container-credentials/v1",
                                         headers={"Authorization": CONTAINER_TOKEN})
        self.assertEqual(status, 200)
        c = json.loads(body)
        self.assertEqual(self.s3("GET", "tree", "c", key_id=c["AccessKeyId"], secret=c["SecretAccessKey"],
                                 session_token=c["Token"])[2], b"c")


class FaultsAndCountersTest(S3Test):
    def test_status_fault_answers_with_an_s3_error(self):
        self.s.control("POST", "/_control/faults", [{"match": {"media": True}, "action": "status", "status": 503}])
        status, _, body = self.s3("GET", "objs", "blob.bin", headers={"Range": "bytes=0-9"})
        self.assertEqual((status, self.error_code(body)), (503, "SlowDown"))
        self.assertEqual(self.s3("GET", "objs", "blob.bin", headers={"Range": "bytes=0-9"})[0], 206)

    def test_truncate_after_applies_to_s3_bodies(self):
        self.s.control("POST", "/_control/faults", [{"match": {"media": True}, "action": "truncate_after",
                                                     "bytes": 1234}])
        host = self.host
        headers = sign("GET", host, "/objs/blob.bin", [], {"Range": "bytes=0-99999"}, KEY_ID, SECRET)
        extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        head, body, error, _ = self.s.raw(f"GET /objs/blob.bin HTTP/1.1\r\nHost: {host}\r\n{extra}\r\n".encode())
        self.assertIn(b"Content-Length: 100000", head)
        self.assertIsNone(error)
        self.assertEqual(len(body), 1234)

    def test_counters(self):
        self.s3("GET", "tree", query=[("list-type", "2")])
        self.s3("HEAD", "objs", "blob.bin")
        self.s3("GET", "objs", "blob.bin", headers={"Range": "bytes=0-99"})
        stats = self.s.json("GET", "/_control/stats")
        self.assertEqual((stats["requests"], stats["s3_requests"], stats["list_requests"], stats["metadata_requests"],
                          stats["media_requests"], stats["bytes_served"]), (3, 3, 1, 1, 1, 100))
        self.assertEqual(stats["auth_headers"], {"Bearer": 0, "none": 0, "AWS4-HMAC-SHA256": 3})
        self.assertEqual(stats["ranges"], [[0, 100, "blob.bin"]])
        self.assertEqual(stats["s3_signers"], {KEY_ID: 3})
        self.assertEqual(sum(stats["s3_user_agents"].values()), 3)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from daemon_check import run_tests
    run_tests()
