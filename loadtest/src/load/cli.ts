#!/usr/bin/env node
/** The `fairgate-load` command (see main.ts and docs/load.md). */
import { runCli } from './main.js';

runCli(process.argv.slice(2))
  .then((outcome) => process.exit(outcome.code))
  .catch((error: unknown) => {
    console.error(error);
    process.exit(1);
  });
