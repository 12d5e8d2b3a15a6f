# One image for every Hikyaku service; docker-compose.yml picks the command (README, Operations).
FROM python:3.11-slim
ENV PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app
COPY requirements.lock pyproject.toml README.md ./
RUN pip install --no-cache-dir --require-hashes -r requirements.lock
COPY . .
RUN pip install --no-cache-dir --no-deps -e . \
 && DJANGO_SECRET_KEY=build DJANGO_DEBUG=false python manage.py collectstatic --no-input -v0 \
 && useradd --system --uid 10001 --no-create-home --home-dir /app hikyaku
# The code is read-only to the server processes; they write only to /tmp and the tmpfs that
# docker-compose.yml mounts for metrics.
USER hikyaku
EXPOSE 8000 8001 9100
# The request/response server; docker-compose.yml overrides this per service.
CMD ["granian", "--interface", "wsgi", "--host", "0.0.0.0", "--port", "8000", "--no-ws", "hikyaku.wsgi:application"]
