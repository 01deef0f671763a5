"""Nexum as an MCP server: the agent tools and resources (``tools``), the ``task_context`` prompt and the
listed resources (``prompts``), calling the REST API in process (``calls``), the SDK server and the stdio
transport (``server``), Streamable HTTP at ``/mcp`` (``http``) and ``manage.py nexum_mcp --token …``
(stdio)."""
