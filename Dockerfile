FROM python:3.11-slim
ENV PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app
COPY requirements.lock pyproject.toml README.md ./
RUN pip install --no-cache-dir --require-hashes -r requirements.lock
COPY . .
RUN pip install --no-cache-dir --no-deps -e . \
 && DJANGO_SECRET_KEY=build DJANGO_DEBUG=false python manage.py collectstatic --no-input -v0
EXPOSE 8000
CMD ["daphne", "-b", "0.0.0.0", "-p", "8000", "hikyaku.asgi:application"]
