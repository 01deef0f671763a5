# Two commands for a newcomer: `make run` (the service with a demo world) and `make test` (everything).
# `make serve` runs it in production (README: "Running in production").
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: run demo-reset serve serve-environment demo-agent demo-frameworks test contract typescript-client lint format bench clean

# The Python client (clients/python) is installed beside the service, with its framework adapters' extras:
# their tests run against a live server. langchain-mcp-adapters gets an interpreter of its own inside the venv
# (every release needs mcp<2, the server mcp 2.x): tests/e2e/test_mcp_frameworks.py runs its agent there.
LANGCHAIN_MCP_VENV := $(VENV)/langchain-mcp
LANGCHAIN_MCP_REQUIREMENTS := tests/e2e/langchain_mcp/requirements.txt
$(STAMP): pyproject.toml clients/python/pyproject.toml $(LANGCHAIN_MCP_REQUIREMENTS)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[dev]" -e "./clients/python[langchain,openai-agents,pydantic-ai]"
	test -x $(LANGCHAIN_MCP_VENV)/bin/python || $(PYTHON) -m venv $(LANGCHAIN_MCP_VENV)
	$(LANGCHAIN_MCP_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(LANGCHAIN_MCP_VENV)/bin/python -m pip install --quiet -r $(LANGCHAIN_MCP_REQUIREMENTS)
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py nexum_demo
	@echo ""
	@echo "  Nexum is starting on the embedded default (SQLite, Celery eager):"
	@echo "    admin        http://$(HOST):$(PORT)/admin/   (admin / admin)"
	@echo "    escalations  http://$(HOST):$(PORT)/escalations/"
	@echo "    API docs     http://$(HOST):$(PORT)/api/docs/"
	@echo "    health       http://$(HOST):$(PORT)/api/v1/health"
	@echo ""
	$(BIN)/python manage.py runserver $(HOST):$(PORT)

# The demo from its start again (development only): erases the development database (every project, the
# whole log), puts back the demo's workspace copy of examples/auth-service, and loads the demo afresh.
demo-reset: $(STAMP)
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py nexum_demo --reset

# The environment is checked before anything is installed, so a missing variable fails at once.
serve: serve-environment $(STAMP)
	PATH="$(abspath $(BIN)):$$PATH" exec deploy/serve.sh

serve-environment:
	@deploy/serve.sh --check

# An agent loop through the Python client against the service `make run` started (another terminal).
demo-agent: $(STAMP)
	$(BIN)/python examples/agent_loop.py --url http://$(HOST):$(PORT)

# The same task through LangGraph, the OpenAI Agents SDK and PydanticAI (nexum_client.adapters), each with a
# scripted model, against the service `make run` started.
FRAMEWORK_EXAMPLES := langgraph_agent openai_agents_agent pydantic_ai_agent
demo-frameworks: $(STAMP)
	for example in $(FRAMEWORK_EXAMPLES); do \
		$(BIN)/python examples/$$example.py --url http://$(HOST):$(PORT) || exit 1; \
	done

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# Schema = server: schemathesis against a live server, every check (tests/e2e/test_api_contract.py), alone;
# `make test` runs it with the rest.
contract: $(STAMP)
	$(BIN)/python -m pytest tests/e2e/test_api_contract.py -p no:randomly

# The TypeScript client (clients/typescript): npm ci from its lockfile, its types generated again from this
# server's OpenAPI schema (commit src/schema.ts when it changes), then built. `make test` builds it and runs its
# node tests against a live server (tests/e2e/test_typescript_client.py), and fails when src/schema.ts is stale.
TS_CLIENT := clients/typescript
typescript-client: $(STAMP)
	cd $(TS_CLIENT) && npm ci --no-audit --no-fund
	$(BIN)/python manage.py spectacular --format openapi-json --file $(TS_CLIENT)/openapi.json
	cd $(TS_CLIENT) && NEXUM_SCHEMA=openapi.json npm run generate && npm run build

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

bench: $(STAMP)
	$(BIN)/python bench/append.py

clean:
	rm -rf $(VENV) data/*.sqlite3* data/artifacts data/workspace data/published
	rm -rf $(TS_CLIENT)/node_modules $(TS_CLIENT)/dist $(TS_CLIENT)/openapi.json
