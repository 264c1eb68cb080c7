FROM python:3.11-slim

WORKDIR /app
# Only what the wheel needs: the build context also holds .venv and caches.
COPY pyproject.toml README.md ./
COPY src ./src
COPY projector ./projector
RUN pip install --no-cache-dir '.[hiredis]'

CMD ["python", "-m", "projector", "--help"]
