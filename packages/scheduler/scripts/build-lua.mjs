// Builds the scheduler's Redis function library from lua/<verbNoun>-<numKeys>.lua and the
// includes they pull in with `--- @include "includes/<name>"` lines, into
// src/generated/scripts.ts, so nothing reads the filesystem at runtime.
//
// One library (`#!lua name=fairgate_<version>_<hash>`, loaded with FUNCTION LOAD) holds every
// include once, at its top level, and registers one function per entry script. The helpers
// are so defined once per load instead of once per call, as EVALSHA scripts redefine them:
// ~17 us of Redis CPU per engine call (docs/scheduler.md).
//
// An include whose top-level state is per call (the call's KEYS, the cached server time)
// declares how to reset it with a `--- @percall <statement>` line; every function that
// includes it starts with that statement. Includes are resolved recursively and each is
// emitted once (first use wins), which lets an include pull in what it depends on.
//
// The name carries the package version and a hash of the library's code, so two builds whose
// Lua differs (a rolling deploy, a before/after benchmark on one Redis) never load over each
// other's functions, even at the same version: each calls its own.
//
// Every entry is a function of the library-level table `entryFunctions`, registered by its
// name; lua/batch-1.lua runs several engine calls through that table in one FCALL.
//
// The include `generated/settings` is made here, not read from lua/: the config hash's
// settings fields and each one's fallback, from the settings table in
// packages/core/src/scheduler-settings.ts (scripts/settings-include.mjs).
//
// Each entry is also emitted flattened (its includes, per-call statements and body, in the
// order the function runs them) for the static checks in test/scripts.test.ts.
import { createHash } from 'node:crypto';
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { settingsInclude } from './settings-include.mjs';

const packageDir = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const luaDir = join(packageDir, 'lua');
const outFile = join(packageDir, 'src', 'generated', 'scripts.ts');
const { version } = JSON.parse(readFileSync(join(packageDir, 'package.json'), 'utf8'));
const versionTag = version.replace(/[^A-Za-z0-9]/g, '_');
/** Stands for the library's name until the code it names is known (it is part of it). */
const NAME_PLACEHOLDER = '@LIBRARY@';

const ENTRY_NAME = /^([a-z][A-Za-z]*)-(\d+)\.lua$/;
const INCLUDE_LINE = /^---\s*@include\s+"([^"]+)"\s*$/;
const PERCALL_LINE = /^---\s*@percall\s+(.+)$/;
const SHEBANG = /^#!lua(?: flags=([a-z-]+(?:,[a-z-]+)*))?$/;
const RCALL_LINE = 'local rcall = redis.call';
/** The library's table of entry functions (name -> function(KEYS, ARGV)). */
const ENTRY_TABLE = 'entryFunctions';

/** Includes made by the build instead of read from lua/. */
const GENERATED_INCLUDES = new Map([['generated/settings', await settingsInclude()]]);

/** An include's lines (its own includes expanded first) and its per-call statements. */
function expand(name, state, stack) {
  if (stack.includes(name)) throw new Error(`include cycle: ${[...stack, name].join(' -> ')}`);
  const text = GENERATED_INCLUDES.get(name) ?? readFileSync(join(luaDir, `${name}.lua`), 'utf8');
  const lines = [];
  for (const line of text.split('\n')) {
    const include = INCLUDE_LINE.exec(line.trim());
    if (include) {
      lines.push(...use(include[1], state, [...stack, name]));
      continue;
    }
    const percall = PERCALL_LINE.exec(line.trim());
    if (percall) state.percall.push(percall[1]);
    lines.push(line);
  }
  return lines;
}

/** Lines to emit for one include line: the include the first time, nothing after. */
function use(name, state, stack) {
  if (state.emitted.has(name)) {
    state.percall.push(...(state.percallOf.get(name) ?? []));
    return [];
  }
  state.emitted.add(name);
  const before = state.percall.length;
  const lines = [`-- >>> ${name}`, ...expand(name, state, stack), `-- <<< ${name}`];
  state.percallOf.set(name, state.percall.slice(before));
  return lines;
}

/** Parses one entry script into its flags, the includes' lines and its body. */
function parseEntry(fileName) {
  const [shebang, ...lines] = readFileSync(join(luaDir, fileName), 'utf8').split('\n');
  const flags = SHEBANG.exec(shebang ?? '');
  if (!flags) throw new Error(`lua/${fileName}: first line must be #!lua [flags=...]`);
  const own = { emitted: new Set(), percall: [], percallOf: new Map() };
  const includeLines = [];
  const body = [];
  let sawRcall = false;
  for (const line of lines) {
    const include = INCLUDE_LINE.exec(line.trim());
    if (include) {
      includeLines.push(...use(include[1], own, [fileName]));
      libraryLines.push(...use(include[1], libraryState, [fileName]));
    } else if (line.trim() === RCALL_LINE) {
      sawRcall = true;
    } else {
      body.push(line);
    }
  }
  if (!sawRcall) throw new Error(`lua/${fileName}: must define \`${RCALL_LINE}\``);
  return {
    shebang,
    flags: flags[1] ? flags[1].split(',') : [],
    percall: [...new Set(own.percall)],
    includeLines,
    body,
  };
}

const nonEmpty = (lines) => lines.filter((line) => line.trim() !== '');
/** Every include once, in order of first use over all entries: the library's top level. */
const libraryLines = [];
const libraryState = { emitted: new Set(), percall: [], percallOf: new Map() };
const entries = [];
for (const fileName of readdirSync(luaDir).sort()) {
  if (!fileName.endsWith('.lua')) continue;
  const match = ENTRY_NAME.exec(fileName);
  if (!match) throw new Error(`lua/${fileName}: entry scripts are named verbNoun-<numKeys>.lua`);
  const [, name, keys] = match;
  entries.push({ name, keys: Number(keys), ...parseEntry(fileName) });
}

const functionName = (name) => `${NAME_PLACEHOLDER}_${name}`;
// Each entry is a function of the library's `entryFunctions` table, registered under its
// name: lua/batch-1.lua calls the engine's entries through that table, several in one FCALL.
const definitions = entries.map((entry) => [
  `${ENTRY_TABLE}.${entry.name} = function(KEYS, ARGV)`,
  'rcall = redis.call',
  ...entry.percall,
  ...entry.body,
  'end',
]);
const registrations = entries.map((entry) => {
  const flags = entry.flags.length
    ? `, flags = { ${entry.flags.map((f) => `'${f}'`).join(', ')} }`
    : '';
  return `redis.register_function{ function_name = '${functionName(entry.name)}'${flags}, callback = ${ENTRY_TABLE}.${entry.name} }`;
});
// redis.call is not reachable while a library loads: rcall is bound by every call.
const unnamedLibrary = nonEmpty([
  `#!lua name=${NAME_PLACEHOLDER}`,
  'local rcall',
  ...libraryLines,
  `local ${ENTRY_TABLE} = {}`,
  ...definitions.flat(),
  ...registrations,
]).join('\n');
const codeHash = createHash('sha256').update(unnamedLibrary).digest('hex').slice(0, 10);
const libraryName = `fairgate_${versionTag}_${codeHash}`;
const named = (text) => text.replaceAll(NAME_PLACEHOLDER, libraryName);
const library = named(unnamedLibrary);

const scripts = entries.map((entry) => ({
  name: entry.name,
  keys: entry.keys,
  function: named(functionName(entry.name)),
  content: nonEmpty([
    entry.shebang,
    RCALL_LINE,
    ...entry.includeLines,
    ...entry.percall,
    ...entry.body,
  ]).join('\n'),
}));

const body = scripts
  .map(
    (s) =>
      `  ${s.name}: {\n    name: '${s.name}',\n    keys: ${s.keys},\n    function: '${s.function}',\n    content: ${JSON.stringify(s.content)},\n  },`,
  )
  .join('\n');
const source = `// Generated by scripts/build-lua.mjs from lua/*.lua. Do not edit.
export interface ScriptSource {
  readonly name: string;
  readonly keys: number;
  /** The Redis function (in \`library\`) that runs it. */
  readonly function: string;
  /** The entry flattened as its function runs it (for static checks; not sent to Redis). */
  readonly content: string;
}

/** The function library: every include once, one registered function per entry script. */
export const library = {
  name: '${libraryName}',
  content: ${JSON.stringify(library)},
} as const;

export const scripts = {
${body}
} as const satisfies Record<string, ScriptSource>;

export type ScriptName = keyof typeof scripts;
`;
mkdirSync(dirname(outFile), { recursive: true });
writeFileSync(outFile, source);
console.log(
  `build-lua: library ${libraryName}, ${scripts.length} functions, ${library.length} bytes -> ${outFile.slice(packageDir.length + 1)}`,
);
