"""Adapters that put Nexum where agent frameworks look for context, each an optional extra of nexum-client:
``nexum_client.adapters.langchain`` (``nexum-client[langchain]``), ``nexum_client.adapters.openai_agents``
(``[openai-agents]``), ``nexum_client.adapters.pydantic_ai`` (``[pydantic-ai]``). Importing one without its
framework installed raises ``ImportError`` naming the extra."""
