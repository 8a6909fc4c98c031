#!/bin/sh
# The service's own PostgreSQL role, created once when the data directory is new
# (the postgres image runs /docker-entrypoint-initdb.d/*.sh as its superuser).
# The service owns its database, so its migrations can create tables there, and
# nothing else: no superuser, no other databases, no roles. Its password comes
# from COSTMODEL_DB_PASSWORD (compose: the environment; Kubernetes: a Secret).
set -eu
: "${COSTMODEL_DB_PASSWORD:?the service role's password}"
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname postgres \
  --set=password="$COSTMODEL_DB_PASSWORD" <<'SQL'
CREATE ROLE costmodel LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION
  PASSWORD :'password';
CREATE DATABASE costmodel OWNER costmodel;
REVOKE ALL ON DATABASE costmodel FROM PUBLIC;
SQL
