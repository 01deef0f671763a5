from django.apps import AppConfig


class McpConfig(AppConfig):
    name = "nexum.mcp"
    label = "nexum_mcp"
    verbose_name = "MCP server"
