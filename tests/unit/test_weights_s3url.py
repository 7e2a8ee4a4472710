"""s3:// URL parsing, key joining, size parsing and the one-line error messages."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, NoCredentialsError

from slabench.core.errors import UserError
from slabench.weights.s3 import OperationFailed, S3Url, describe_error, human_bytes, parse_s3_url, parse_size


@pytest.mark.parametrize(
    ("text", "bucket", "prefix"),
    [
        ("s3://my-bucket", "my-bucket", ""),
        ("s3://my-bucket/", "my-bucket", ""),
        ("s3://my-bucket/models/acme/tiny/v1", "my-bucket", "models/acme/tiny/v1"),
        ("s3://my.bucket.1/a//b/", "my.bucket.1", "a/b"),
    ],
)
def test_parse_s3_url(text, bucket, prefix):
    assert parse_s3_url(text) == S3Url(bucket, prefix)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("/mnt/models", "not an s3:// URL"),
        ("https://b.s3.amazonaws.com/x", "not an s3:// URL"),
        ("s3://", "not a valid bucket name"),
        ("s3://ab/x", "not a valid bucket name"),
        ("s3://My_Bucket/x", "not a valid bucket name"),
        ("s3://bucket/a/../b", "'.' or '..'"),
    ],
)
def test_parse_s3_url_rejects_with_the_expected_form(text, message):
    with pytest.raises(UserError, match=message):
        parse_s3_url(text, "--source")


def test_key_and_child_join_without_double_slashes():
    root = S3Url("b", "models")
    assert root.key("acme/tiny", "v1", "config.json") == "models/acme/tiny/v1/config.json"
    assert S3Url("b", "").key("x") == "x"
    assert str(root.child("acme/tiny", "v1")) == "s3://b/models/acme/tiny/v1"
    assert str(S3Url("b", "")) == "s3://b"


@pytest.mark.parametrize(
    ("text", "value"),
    [("1048576", 1048576), ("64MB", 64_000_000), ("8MiB", 8 * 1024**2), ("500k", 500_000), ("1.5GB", 1_500_000_000)],
)
def test_parse_size(text, value):
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["", "MB", "-1MB", "ten", "5XB"])
def test_parse_size_rejects(text):
    with pytest.raises(ValueError, match="not a size"):
        parse_size(text)


def test_human_bytes():
    assert human_bytes(999) == "999 B"
    assert human_bytes(1_500_000) == "1.50 MB"
    assert human_bytes(8e12) == "8.00 TB"


def _client_error(code: str, status: int) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}}, "Op")


@pytest.mark.parametrize(
    ("exc", "cls", "text"),
    [
        (_client_error("NoSuchBucket", 404), UserError, "bucket 'bkt' does not exist"),
        (_client_error("AccessDenied", 403), UserError, "access denied"),
        (_client_error("NoSuchKey", 404), UserError, "not found"),
        (_client_error("InternalError", 500), OperationFailed, "S3 error InternalError"),
        (NoCredentialsError(), UserError, "no AWS credentials"),
        (EndpointConnectionError(endpoint_url="http://x"), OperationFailed, "cannot reach"),
    ],
)
def test_describe_error_gives_one_line_with_the_fix(exc, cls, text):
    err = describe_error(exc, S3Url("bkt", "p"))
    assert type(err) is cls
    assert text in str(err) and "\n" not in str(err)
    assert str(err).startswith("s3://bkt/p: ")


def test_describe_error_leaves_foreign_exceptions_alone():
    assert describe_error(ValueError("x"), S3Url("bkt", "")) is None


def test_a_malformed_endpoint_is_a_user_error():
    from slabench.weights.s3 import make_client

    with pytest.raises(UserError, match=r"Invalid endpoint: not a url .* check --endpoint-url"):
        make_client("not a url", "us-east-1")
