import { describe } from 'vitest';
import { describeSchedulerConformance } from './conformance/index.js';
import { localBackend } from './support/backends.js';

describe('LocalScheduler conformance', () => {
  const backend = localBackend();
  describeSchedulerConformance(() => backend);
});
