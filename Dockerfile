FROM python:3.11-slim

WORKDIR /app
# Only what the wheel needs: the build context also holds .venv and caches.
COPY pyproject.toml README.md ./
COPY src ./src
COPY examples ./examples
# langgraph for the example agent (examples/agent.py)
RUN pip install --no-cache-dir '.[hiredis]' 'langgraph>=1.0'

CMD ["streamsaver", "projector", "--help"]
