/**
 * PostgreSQL's own parser (libpg-query), loaded on first use: requiring it instantiates its
 * WebAssembly at once, reserving about 130 MB (a few MB of it resident) in every worker, most of
 * which never parse SQL (change plans' statements, `objects: all`'s restore scripts).
 */
type Parser = typeof import('libpg-query');
let parser: Promise<Parser> | undefined;

export function loadParser(): Promise<Parser> {
  parser ??= (async () => {
    const module = require('libpg-query') as Parser;
    await module.loadModule();
    return module;
  })();
  return parser;
}
