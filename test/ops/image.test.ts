import { execFile } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join, posix } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { apiKeyDigest, parseConfigText } from '@fairgate/config';
import { describe, expect, it } from 'vitest';

/**
 * Static checks of the Dockerfile and .dockerignore against the repository (no container
 * engine needed). The tree under test is a built one (`npm test` builds first), so every
 * path the runtime stage copies from the build stage can be checked to exist.
 */

const root = fileURLToPath(new URL('../../', import.meta.url));
const run = promisify(execFile);

// ---- a parser for the Dockerfile instructions this repository uses ----

interface Instruction {
  keyword: string;
  /** Leading `--name=value` flags (COPY --from, HEALTHCHECK --interval, ...). */
  flags: Record<string, string>;
  /** The arguments after the flags: the exec form's array, else the shell form's words. */
  args: string[];
  /** The arguments after the flags as written. */
  text: string;
  exec: boolean;
  line: number;
}

interface Stage {
  name: string | undefined;
  image: string;
  instructions: Instruction[];
}

/** Joins continuation lines and drops comments and parser directives (as Docker does). */
function logicalLines(text: string): { line: number; text: string }[] {
  const out: { line: number; text: string }[] = [];
  let current: { line: number; text: string } | undefined;
  for (const [index, raw] of text.split('\n').entries()) {
    const trimmed = raw.trim();
    if (trimmed.startsWith('#') || (trimmed === '' && !current)) continue;
    const continued = trimmed.endsWith('\\');
    const body = continued ? trimmed.slice(0, -1).trim() : trimmed;
    if (current) current.text += ` ${body}`;
    else current = { line: index + 1, text: body };
    if (!continued) {
      out.push(current);
      current = undefined;
    }
  }
  if (current) out.push(current);
  return out;
}

function substitute(value: string, args: Map<string, string>): string {
  return value.replace(/\$\{(\w+)\}|\$(\w+)/g, (whole, braced?: string, bare?: string) => {
    const name = braced ?? bare ?? '';
    return args.get(name) ?? whole;
  });
}

function parseInstruction(line: number, text: string): Instruction {
  const match = /^(\S+)\s*(.*)$/.exec(text);
  if (!match) throw new Error(`Dockerfile line ${line}: cannot parse '${text}'`);
  const keyword = match[1]!.toUpperCase();
  let rest = match[2]!;
  const flags: Record<string, string> = {};
  for (;;) {
    const flag = /^--([\w-]+)(?:=(\S*))?\s*/.exec(rest);
    if (!flag) break;
    flags[flag[1]!] = flag[2] ?? 'true';
    rest = rest.slice(flag[0].length);
  }
  if (rest.startsWith('[')) {
    const args = JSON.parse(rest) as unknown;
    if (!Array.isArray(args) || !args.every((a) => typeof a === 'string')) {
      throw new Error(`Dockerfile line ${line}: exec form must be an array of strings`);
    }
    return { keyword, flags, args, text: rest, exec: true, line };
  }
  return { keyword, flags, args: rest.split(/\s+/).filter(Boolean), text: rest, exec: false, line };
}

function parseDockerfile(text: string): Stage[] {
  const globalArgs = new Map<string, string>();
  const stages: Stage[] = [];
  for (const { line, text: body } of logicalLines(text)) {
    const instruction = parseInstruction(line, body);
    if (instruction.keyword === 'FROM') {
      const [image, as, name] = instruction.args;
      if (!image || (as !== undefined && (as.toUpperCase() !== 'AS' || !name))) {
        throw new Error(`Dockerfile line ${line}: FROM <image> [AS <name>]`);
      }
      stages.push({ name, image: substitute(image, globalArgs), instructions: [] });
      continue;
    }
    const stage = stages.at(-1);
    if (!stage) {
      if (instruction.keyword !== 'ARG') throw new Error(`line ${line}: ${body} before FROM`);
      const arg = instruction.args[0] ?? '';
      const eq = arg.indexOf('=');
      globalArgs.set(eq < 0 ? arg : arg.slice(0, eq), eq < 0 ? '' : arg.slice(eq + 1));
      continue;
    }
    stage.instructions.push(instruction);
  }
  return stages;
}

/** The instruction's HEALTHCHECK command (exec form) after `CMD`. */
function healthcheckCommand(instruction: Instruction): string[] {
  const match = /^CMD\s+(\[.*\])$/s.exec(instruction.text);
  if (!match) throw new Error(`line ${instruction.line}: HEALTHCHECK must use CMD [exec form]`);
  return JSON.parse(match[1]!) as string[];
}

/** COPY sources and destination, the destination resolved against the WORKDIR in force. */
function copies(stage: Stage): { from?: string; sources: string[]; dest: string; line: number }[] {
  const out: { from?: string; sources: string[]; dest: string; line: number }[] = [];
  let workdir = '/';
  for (const instruction of stage.instructions) {
    if (instruction.keyword === 'WORKDIR') workdir = posix.resolve(workdir, instruction.args[0]!);
    if (instruction.keyword !== 'COPY') continue;
    const sources = instruction.args.slice(0, -1);
    const dest = posix.resolve(workdir, instruction.args.at(-1)!);
    const from = instruction.flags.from;
    out.push({ ...(from ? { from } : {}), sources, dest, line: instruction.line });
  }
  return out;
}

function workdirOf(stage: Stage): string {
  let workdir = '/';
  for (const i of stage.instructions) {
    if (i.keyword === 'WORKDIR') workdir = posix.resolve(workdir, i.args[0]!);
  }
  return workdir;
}

function runs(stage: Stage): Instruction[] {
  return stage.instructions.filter((i) => i.keyword === 'RUN');
}

// ---- .dockerignore with Docker's semantics: last matching pattern wins; a pattern that
// matches a directory matches everything below it ----

interface IgnorePattern {
  exclusion: boolean;
  regex: RegExp;
}

function globToRegex(pattern: string): RegExp {
  const segments = pattern.split('/');
  let body = '';
  for (const [index, segment] of segments.entries()) {
    const first = index === 0;
    const last = index === segments.length - 1;
    if (segment === '**') {
      // Any number of directories, none included.
      if (first) body += last ? '.*' : '(?:.*/)?';
      else body += last ? '(?:/.*)?' : '/(?:.*/)?';
      continue;
    }
    if (!first && segments[index - 1] !== '**') body += '/';
    body += segment
      .replace(/[.+^${}()|[\]\\]/g, '\\$&')
      .replace(/\*/g, '[^/]*')
      .replace(/\?/g, '[^/]');
  }
  return new RegExp(`^${body}$`);
}

function parseDockerignore(text: string): IgnorePattern[] {
  return text
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l && !l.startsWith('#'))
    .map((l) => {
      const exclusion = l.startsWith('!');
      const pattern = posix.normalize((exclusion ? l.slice(1) : l).replace(/^\/+/, ''));
      return { exclusion, regex: globToRegex(pattern.replace(/\/+$/, '')) };
    });
}

function ignored(patterns: IgnorePattern[], path: string): boolean {
  const parts = path.split('/');
  let excluded = false;
  for (const pattern of patterns) {
    for (let depth = 1; depth <= parts.length; depth++) {
      if (pattern.regex.test(parts.slice(0, depth).join('/'))) {
        excluded = !pattern.exclusion;
        break;
      }
    }
  }
  return excluded;
}

/** Repository files under `dir` (relative), skipping installs and build outputs. */
function filesUnder(dir: string): string[] {
  const absolute = join(root, dir);
  if (!statSync(absolute).isDirectory()) return [dir];
  const out: string[] = [];
  for (const entry of readdirSync(absolute, { withFileTypes: true })) {
    if (['node_modules', 'dist', '.turbo', '.git'].includes(entry.name)) continue;
    const child = posix.join(dir, entry.name);
    if (entry.isDirectory()) out.push(...filesUnder(child));
    else out.push(child);
  }
  return out;
}

// ---- the repository's workspaces ----

interface Manifest {
  name: string;
  bin?: Record<string, string>;
  scripts?: Record<string, string>;
  dependencies?: Record<string, string>;
  devDependencies?: Record<string, string>;
  workspaces?: string[];
  engines?: { node?: string };
}

function readJson<T>(path: string): T {
  return JSON.parse(readFileSync(join(root, path), 'utf8')) as T;
}

const rootManifest = readJson<Manifest>('package.json');

/** Workspace directories (relative, posix), from the root package.json's globs. */
const workspaces: string[] = (rootManifest.workspaces ?? []).flatMap((glob) => {
  if (!glob.endsWith('/*')) return existsSync(join(root, glob, 'package.json')) ? [glob] : [];
  const parent = glob.slice(0, -2);
  return readdirSync(join(root, parent))
    .map((name) => `${parent}/${name}`)
    .filter((dir) => existsSync(join(root, dir, 'package.json')));
});
const manifests = new Map(
  workspaces.map((dir) => [dir, readJson<Manifest>(`${dir}/package.json`)]),
);
const builtWorkspaces = workspaces.filter((dir) => manifests.get(dir)?.scripts?.build);

const stages = parseDockerfile(readFileSync(join(root, 'Dockerfile'), 'utf8'));
const build = stages.find((s) => s.name === 'build');
const runtime = stages.at(-1)!;
const ignorePatterns = parseDockerignore(readFileSync(join(root, '.dockerignore'), 'utf8'));

function expectBuilt(): void {
  const entry = join(root, 'apps/gateway/dist/main.js');
  if (!existsSync(entry)) throw new Error('no apps/gateway/dist: run `npm run build` first');
}

describe('Dockerfile', () => {
  it('has a build stage and a runtime stage, both on the Node major of engines.node', () => {
    expect(build, 'a stage named build').toBeDefined();
    expect(runtime.name).toBe('runtime');
    const major = /(\d+)/.exec(rootManifest.engines?.node ?? '')?.[1];
    expect(major).toBeDefined();
    for (const stage of [build!, runtime]) {
      expect(stage.image, `stage ${stage.name}`).toMatch(new RegExp(`^node:${major}[.-]`));
    }
  });

  it('copies from the build context only paths that exist and that .dockerignore lets in', () => {
    const problems: string[] = [];
    for (const stage of stages) {
      for (const copy of copies(stage)) {
        if (copy.from) continue;
        for (const source of copy.sources) {
          if (!existsSync(join(root, source))) {
            problems.push(`line ${copy.line}: ${source} does not exist`);
            continue;
          }
          const files = filesUnder(source).filter((f) => !ignored(ignorePatterns, f));
          if (files.length === 0) problems.push(`line ${copy.line}: ${source} is all ignored`);
        }
      }
    }
    expect(problems).toEqual([]);
  });

  it("sends every input of every workspace's build (turbo.json) into the build stage", () => {
    // turbo.json's declared build inputs are what the build reads; each must be in the
    // context and under a COPY of the build stage (src/generated is an output).
    const turbo = readJson<{ tasks: { build: { inputs: string[] } } }>('turbo.json');
    const inputs = turbo.tasks.build.inputs.map(globToRegex);
    const copied = copies(build!)
      .filter((c) => !c.from)
      .flatMap((c) => c.sources);
    const missing: string[] = [];
    for (const dir of builtWorkspaces) {
      for (const file of filesUnder(dir)) {
        const inWorkspace = file.slice(dir.length + 1);
        if (!inputs.some((r) => r.test(inWorkspace)) || inWorkspace.startsWith('src/generated/'))
          continue;
        const isCopied = copied.some((s) => file === s || file.startsWith(`${s}/`));
        if (ignored(ignorePatterns, file) || !isCopied) missing.push(file);
      }
      const tsconfig = readJson<{ extends?: string }>(`${dir}/tsconfig.json`);
      if (tsconfig.extends) {
        const base = posix.normalize(posix.join(dir, tsconfig.extends));
        if (ignored(ignorePatterns, base) || !copied.includes(base)) missing.push(base);
      }
    }
    expect(missing).toEqual([]);
  });

  it('copies every workspace manifest before each npm ci (npm ci needs the whole lockfile tree)', () => {
    for (const stage of [build!, runtime]) {
      const install = stage.instructions.findIndex(
        (i) => i.keyword === 'RUN' && /\bnpm ci\b/.test(i.text),
      );
      expect(install, `npm ci in stage ${stage.name}`).toBeGreaterThan(-1);
      const installLine = stage.instructions[install]!.line;
      const before = copies(stage)
        .filter((c) => !c.from && c.line < installLine)
        .flatMap((c) => c.sources);
      for (const file of ['package.json', 'package-lock.json', '.npmrc']) {
        expect(before, `stage ${stage.name}`).toContain(file);
      }
      for (const dir of workspaces) {
        expect(before, `stage ${stage.name}`).toContain(`${dir}/package.json`);
      }
    }
  });

  it('installs without install scripts, and the lockfile has none beyond the reviewed ones', () => {
    for (const stage of [build!, runtime]) {
      const installs = runs(stage).filter((i) => /\bnpm (ci|install|i)\b/.test(i.text));
      expect(installs.length, `stage ${stage.name}`).toBeGreaterThan(0);
      for (const i of installs) expect(i.text).toMatch(/--ignore-scripts\b/);
    }
    // Reviewed (Dockerfile comment): optional native speed-ups with a JS fallback, a
    // version notice, and esbuild's binary check (dev only). A new one needs a look.
    const reviewed = ['cpu-features', 'protobufjs', 'ssh2', 'esbuild', 'msgpackr-extract'];
    const lock = readJson<{ packages: Record<string, { hasInstallScript?: boolean }> }>(
      'package-lock.json',
    );
    const withScripts = Object.entries(lock.packages)
      .filter(([, entry]) => entry.hasInstallScript)
      .map(([path]) => path.slice(path.lastIndexOf('node_modules/') + 'node_modules/'.length));
    expect(withScripts.filter((name) => !reviewed.includes(name))).toEqual([]);
  });

  it('copies every path it takes from the build stage out of the built tree, never node_modules', () => {
    expectBuilt();
    const buildDir = workdirOf(build!);
    const problems: string[] = [];
    for (const stage of stages) {
      for (const copy of copies(stage).filter((c) => c.from)) {
        expect(copy.from).toBe('build');
        for (const source of copy.sources) {
          const inRepo = posix.relative(buildDir, posix.resolve(buildDir, source));
          if (inRepo.startsWith('..')) problems.push(`line ${copy.line}: ${source} outside /app`);
          else if (inRepo.split('/').includes('node_modules'))
            problems.push(
              `line ${copy.line}: ${source}: the build stage's node_modules has dev deps`,
            );
          else if (!existsSync(join(root, inRepo)))
            problems.push(`line ${copy.line}: ${source} not in the built tree`);
        }
      }
    }
    expect(problems).toEqual([]);
  });

  it("gives the runtime every built workspace's dist/ at the same path", () => {
    const runtimeDir = workdirOf(runtime);
    const fromBuild = copies(runtime).filter((c) => c.from === 'build');
    for (const dir of builtWorkspaces) {
      const target = posix.join(runtimeDir, dir, 'dist');
      const copy = fromBuild.find((c) => c.dest === target);
      expect(copy, `COPY --from=build .../${dir}/dist ${dir}/dist`).toBeDefined();
      expect(copy!.sources).toEqual([posix.join(workdirOf(build!), dir, 'dist')]);
    }
  });

  it("puts fairgate, fairgate-sim and fairgate-load on the PATH, each bin's target built", () => {
    expectBuilt();
    const runtimeDir = workdirOf(runtime);
    const env = runtime.instructions.filter((i) => i.keyword === 'ENV').map((i) => i.text);
    const binDir = posix.join(runtimeDir, 'node_modules/.bin');
    expect(env.some((e) => new RegExp(`PATH=${binDir}:`).test(e))).toBe(true);

    // The built workspaces' bins (packages/build's fairgate-build builds them; it is not shipped).
    const bins = new Map<string, string>();
    for (const dir of builtWorkspaces) {
      for (const [name, target] of Object.entries(manifests.get(dir)?.bin ?? {})) {
        bins.set(name, posix.join(dir, target));
      }
    }
    expect([...bins.keys()].sort()).toEqual(['fairgate', 'fairgate-load', 'fairgate-sim']);
    const distCopies = copies(runtime).filter((c) => c.from === 'build');
    for (const [name, target] of bins) {
      expect(existsSync(join(root, target)), `${name} -> ${target}`).toBe(true);
      expect(readFileSync(join(root, target), 'utf8')).toMatch(/^#!\/usr\/bin\/env node\n/);
      const inImage = posix.join(runtimeDir, target);
      expect(
        distCopies.some((c) => inImage.startsWith(`${c.dest}/`)),
        `${target} copied into the runtime`,
      ).toBe(true);
    }
    // npm links workspace bins only when their targets exist: the link step runs after
    // the last dist is copied in.
    const lastDist = Math.max(...distCopies.map((c) => c.line));
    const link = runs(runtime).find((i) => /\bnpm rebuild\b/.test(i.text));
    expect(link, 'RUN npm rebuild (links the bins)').toBeDefined();
    expect(link!.line).toBeGreaterThan(lastDist);
  });

  it('gives fairgate-load its built-in scenarios', async () => {
    const { BUILT_IN_NAMES } = await import('../../loadtest/src/load/builtins.js');
    const runtimeDir = workdirOf(runtime);
    const copied = copies(runtime).filter((c) => !c.from);
    for (const name of BUILT_IN_NAMES) {
      const file = `examples/scenarios/${name}.yaml`;
      expect(existsSync(join(root, file)), file).toBe(true);
      expect(ignored(ignorePatterns, file), `${file} ignored`).toBe(false);
      // testkit's repoRoot is the runtime's WORKDIR: the file must land at the same path.
      const inImage = posix.join(runtimeDir, file);
      const landsAt = copied.flatMap((c) =>
        c.sources
          .filter((s) => file.startsWith(`${s}/`))
          .map((s) => posix.join(c.dest, file.slice(s.length + 1))),
      );
      expect(landsAt, `${file} copied into the runtime`).toContain(inImage);
    }
  });

  it('runs tini as PID 1 and the gateway by default, with a config path to mount', () => {
    const entrypoint = runtime.instructions.filter((i) => i.keyword === 'ENTRYPOINT').at(-1);
    expect(entrypoint?.exec).toBe(true);
    expect(entrypoint!.args).toEqual(['/usr/bin/tini', '--']);
    const installsTini = runs(runtime).some((i) => /apt-get install\b.*\btini\b/.test(i.text));
    expect(installsTini, 'RUN apt-get install ... tini').toBe(true);

    const cmd = runtime.instructions.filter((i) => i.keyword === 'CMD').at(-1);
    expect(cmd?.exec).toBe(true);
    const gatewayBin = Object.keys(manifests.get('apps/gateway')?.bin ?? {})[0];
    expect(cmd!.args[0]).toBe(gatewayBin);
    const config = cmd!.args[cmd!.args.indexOf('--config') + 1];
    expect(config).toMatch(/^\/etc\/fairgate\/.+\.yaml$/);
  });

  it('runs as a non-root numeric user (verifiable by Kubernetes runAsNonRoot)', () => {
    const users = runtime.instructions.filter((i) => i.keyword === 'USER');
    expect(users.length).toBeGreaterThan(0);
    const user = users.at(-1)!.args[0] ?? '';
    expect(user).toMatch(/^\d+(:\d+)?$/);
    expect(Number(user.split(':')[0])).toBeGreaterThan(0);
    // The one directory the image writes to (fairgate-load's reports) belongs to it.
    const reports = runs(runtime).find((i) => /\bchown\b/.test(i.text));
    expect(reports?.text).toContain(`chown ${user} /app/reports`);
  });

  it("checks the gateway's /healthz on its default port, with node (slim has no curl)", () => {
    const healthchecks = runtime.instructions.filter((i) => i.keyword === 'HEALTHCHECK');
    expect(healthchecks).toHaveLength(1);
    const command = healthcheckCommand(healthchecks[0]!);
    expect(command[0]).toBe('node');
    const url = /'(http:\/\/127\.0\.0\.1:(\d+)\/healthz)'/.exec(command.join(' '));
    expect(url, 'a default http://127.0.0.1:<port>/healthz').not.toBeNull();
    const defaults = parseConfigText(
      `tenants: [{ id: t, api_key_sha256: ['${apiKeyDigest('k')}'] }]\n` +
        'pods: [{ name: p, url: "http://127.0.0.1:1" }]\n',
    );
    expect(Number(url![2])).toBe(defaults.listen.port);
    const exposed = runtime.instructions
      .filter((i) => i.keyword === 'EXPOSE')
      .flatMap((i) => i.args);
    expect(exposed).toContain(String(defaults.listen.port));
    for (const flag of ['interval', 'timeout', 'retries']) {
      expect(healthchecks[0]!.flags[flag], `--${flag}`).toBeDefined();
    }
  });

  it('installs production dependencies only in the runtime stage', async () => {
    const installs = runs(runtime).filter((i) => /\bnpm (ci|install|i)\b/.test(i.text));
    expect(installs).toHaveLength(1);
    expect(installs[0]!.text).toMatch(/\bnpm ci\b.*--omit=dev\b/);

    // The runtime installs from the lockfile: what it marks dev is left out. The build,
    // lint and test toolchain (the root's devDependencies; @types are inert) must stay
    // dev-only: no production dependency may pull it in.
    const lock = readJson<{
      packages: Record<string, { version?: string; dev?: boolean; link?: boolean }>;
    }>('package-lock.json');
    const prodVersions = new Set<string>();
    for (const [path, entry] of Object.entries(lock.packages)) {
      if (!path.includes('node_modules/') || entry.dev || entry.link) continue;
      const name = path.slice(path.lastIndexOf('node_modules/') + 'node_modules/'.length);
      prodVersions.add(`${name}@${entry.version}`);
    }
    const toolchain = Object.keys(rootManifest.devDependencies ?? {}).filter(
      (name) => !name.startsWith('@types/'),
    );
    expect(toolchain.length).toBeGreaterThan(0);
    for (const tool of toolchain) {
      expect(lock.packages[`node_modules/${tool}`]?.dev, `${tool} is dev-only`).toBe(true);
    }

    // And the production tree npm computes over the installed workspace agrees: none of
    // the toolchain, nothing the lockfile calls dev.
    const { stdout } = await run('npm', ['ls', '--omit=dev', '--all', '--json'], {
      cwd: root,
      maxBuffer: 64 * 1024 * 1024,
    }).catch((error: { stdout?: string }) => ({ stdout: error.stdout ?? '{}' }));
    interface Node {
      version?: string;
      resolved?: string;
      dependencies?: Record<string, Node>;
    }
    const tree = JSON.parse(stdout) as Node;
    // npm prints a package's subtree once and "deduped" stubs elsewhere: keep the full one.
    const inTree = new Map<string, Node>();
    const expanded = new Set<string>();
    const walk = (deps: Record<string, Node> | undefined) => {
      for (const [name, node] of Object.entries(deps ?? {})) {
        if (!node.version) continue; // an optional peer that is not installed
        const key = `${name}@${node.version}`;
        if (!inTree.has(key) || node.resolved) inTree.set(key, node);
        if (!node.dependencies || expanded.has(key)) continue;
        expanded.add(key);
        walk(node.dependencies);
      }
    };
    walk(tree.dependencies);
    expect(inTree.size).toBeGreaterThan(50);
    const names = new Set([...inTree.keys()].map((k) => k.slice(0, k.lastIndexOf('@'))));
    expect(toolchain.filter((tool) => names.has(tool))).toEqual([]);
    const devInTree = [...inTree.entries()]
      .filter(([, node]) => !node.resolved?.startsWith('file:'))
      .map(([key]) => key)
      .filter((key) => !prodVersions.has(key));
    expect(devInTree).toEqual([]);
  });
});

describe('.dockerignore', () => {
  it('keeps installs, build outputs, git and local files out of the context', () => {
    for (const path of [
      'node_modules/yaml/package.json',
      'apps/gateway/node_modules/x/index.js',
      'apps/gateway/dist/main.js',
      'packages/scheduler/src/generated/scripts.ts',
      '.git/HEAD',
      'reports/noisy_neighbor/report.html',
      '.env',
      'packages/config/src/.env',
      'apps/gateway/test/cli.test.ts',
    ]) {
      expect(ignored(ignorePatterns, path), path).toBe(true);
    }
    expect(ignored(ignorePatterns, 'apps/gateway/src/main.ts')).toBe(false);
    expect(ignored(ignorePatterns, 'packages/scheduler/lua/includes/dispatch.lua')).toBe(false);
  });
});
