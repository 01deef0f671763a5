import pytest
from auth_service import InvalidToken, issue_token, verify_token

SECRET = b"demo-secret"


def test_a_fresh_token_verifies():
    token = issue_token("ann", secret=SECRET, now=1_000)
    assert verify_token(token, secret=SECRET, now=1_100) == "ann"


def test_a_forged_token_is_rejected():
    token = issue_token("ann", secret=SECRET, now=1_000)
    with pytest.raises(InvalidToken):
        verify_token(token.replace("ann", "bob"), secret=SECRET, now=1_100)


def test_an_expired_token_is_rejected():
    token = issue_token("ann", secret=SECRET, now=1_000, ttl=60)
    with pytest.raises(InvalidToken):
        verify_token(token, secret=SECRET, now=2_000)
