from django.apps import AppConfig


class McpConfig(AppConfig):
    name = "nexum_web.mcp"
    label = "nexum_mcp"
    verbose_name = "MCP server"
