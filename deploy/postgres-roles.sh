#!/bin/sh
# The two roles of docs/deployment.md ("Teams: PostgreSQL") and the database, for the postgres
# image's /docker-entrypoint-initdb.d (run once, on an empty data volume, as the superuser).
# armarius_owner runs the migrations and owns the tables; armarius_app, the server's login, owns
# nothing and gets its grants from `armarius init`. Neither is a superuser or bypasses row-level security.
set -eu
psql --set=ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname postgres \
     --set=owner_password="$ARMARIUS_OWNER_PASSWORD" --set=app_password="$ARMARIUS_APP_PASSWORD" <<'SQL'
CREATE ROLE armarius_owner LOGIN PASSWORD :'owner_password';
CREATE ROLE armarius_app LOGIN PASSWORD :'app_password';
CREATE DATABASE armarius OWNER armarius_owner;
SQL
