import { describe, it, type TestContext } from 'vitest';

/**
 * Suites that run a real binary (prometheus, docker-compose, kubectl, haproxy, redis-server).
 * On a developer's machine a missing binary skips the suite and says why. Under CI=true it
 * fails the run and names the binary: .ci/run installs every one, so a green CI means every
 * such suite ran.
 */
export const TOOLS_REQUIRED = process.env.CI === 'true';

/** `name -> its path`, or undefined where it is missing. */
export type Tools = Readonly<Record<string, string | undefined>>;

function missingOf(tools: Tools): string[] {
  return Object.entries(tools)
    .filter(([, path]) => !path)
    .map(([name]) => name);
}

const missingText = (missing: readonly string[], install: string) =>
  `${missing.join(', ')} not found on the PATH (${install})`;

/** describe(title, body) when every tool is there; else skipped, or failed under CI=true. */
export function describeWithTools(
  title: string,
  tools: Tools,
  install: string,
  body: () => void,
): void {
  const missing = missingOf(tools);
  if (missing.length === 0) {
    describe(title, body);
    return;
  }
  const why = missingText(missing, install);
  if (TOOLS_REQUIRED) {
    describe(title, () => {
      it(`needs ${missing.join(', ')}`, () => {
        throw new Error(`CI=true requires it: ${why}`);
      });
    });
    return;
  }
  console.warn(`${title}: skipped: ${why}`);
  // Skipped off CI only, for a real reason: the binary is missing on this developer's
  // machine. The rest of the suite still runs, and the title and the warning name what is
  // missing; CI=true never reaches this line (above), it fails instead.
  describe.skip(`${title} (skipped: ${why})`, body);
}

/** The path of a tool one test needs beyond its suite's: throws, naming it, when missing. */
export function requireTool(name: string, path: string | undefined, install: string): string {
  if (!path) throw new Error(`CI=true requires it: ${missingText([name], install)}`);
  return path;
}

/** Whether a test that needs only `path`'s tool is skipped (never under CI=true). */
export const skipWithout = (path: string | undefined) => !path && !TOOLS_REQUIRED;

/**
 * A machine requirement one test checks when it runs (an open-files limit, say): `unmet`
 * names what is missing. Off CI the test is skipped and says why; under CI=true it fails.
 */
export function requireMachine(context: TestContext, unmet: string | undefined): void {
  if (unmet === undefined) return;
  if (TOOLS_REQUIRED) throw new Error(`CI=true requires it: ${unmet}`);
  context.skip(unmet);
}
