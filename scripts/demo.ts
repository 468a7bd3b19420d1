/** `npm run demo [-- --keep --rows N --pg URL --embedded-pg]`: the same as `ferry demo`. */
import { main } from '../src/cli/main';

void main([process.argv[0], 'ferry', 'demo', ...process.argv.slice(2)]).then((code) => process.exit(code));
