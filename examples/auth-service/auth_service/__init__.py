"""A tiny signed-token service (the Nexum demo's example repository)."""

from auth_service.tokens import TOKEN_TTL_SECONDS, InvalidToken, issue_token, verify_token

__all__ = ["TOKEN_TTL_SECONDS", "InvalidToken", "issue_token", "verify_token"]
