#!/usr/bin/env node
// Builds the workspace in the current directory: `fairgate-build [--bundle src/<entry>.ts]...`
//
// - every src/**/*.ts is transpiled to dist/**/*.js (ESM, Node 20, source maps), file for
//   file, so `dist/index.js` is the package's library entry as before;
// - each --bundle entry is then bundled over its transpiled copy (dist/<entry>.js): the
//   workspace packages and the third-party modules it imports statically in one file, its
//   own dynamic imports split into dist/chunks/, third-party dynamic imports (the
//   OpenTelemetry SDK) left to node_modules. A process then loads one file instead of ~600
//   modules: a gateway in ~0.25 CPU-s instead of ~0.7. Only an entry whose code never reads
//   files relative to `import.meta.url` may be bundled (testkit does; loadtest imports it);
// - every target of the package.json `bin` field is made executable.
//
// Types are not checked here: `npm run typecheck` checks every workspace in one tsc program
// (esbuild needs `isolatedModules` and `verbatimModuleSyntax`, which tsconfig.base.json sets).
import { chmodSync, readFileSync, rmSync } from 'node:fs';
import { parseArgs } from 'node:util';
import * as esbuild from 'esbuild';

const { values } = parseArgs({ options: { bundle: { type: 'string', multiple: true } } });
const bundles = values.bundle ?? [];

const common = {
  platform: 'node',
  format: 'esm',
  target: 'node20',
  sourcemap: true,
  logLevel: 'warning',
};

rmSync('dist', { recursive: true, force: true });
await esbuild.build({
  ...common,
  entryPoints: ['src/**/*.ts'],
  outbase: 'src',
  outdir: 'dist',
});

/** Third-party modules a bundle imports dynamically stay in node_modules, loaded on demand. */
const dynamicImportsStayExternal = {
  name: 'dynamic-imports-stay-external',
  setup(build) {
    build.onResolve({ filter: /^[^./]/ }, (args) =>
      args.kind === 'dynamic-import' && !args.path.startsWith('@fairgate/')
        ? { path: args.path, external: true }
        : undefined,
    );
  },
};

if (bundles.length > 0) {
  await esbuild.build({
    ...common,
    entryPoints: bundles,
    outbase: 'src',
    outdir: 'dist',
    bundle: true,
    splitting: true,
    chunkNames: 'chunks/[name]-[hash]',
    allowOverwrite: true,
    // The CommonJS modules in the bundle (ioredis, prom-client) call require() for Node's own.
    banner: {
      js: "import { createRequire } from 'node:module'; const require = createRequire(import.meta.url);",
    },
    plugins: [dynamicImportsStayExternal],
  });
}

const { bin = {} } = JSON.parse(readFileSync('package.json', 'utf8'));
for (const target of Object.values(bin)) chmodSync(target, 0o755);
