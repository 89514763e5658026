export { ClientLink } from './client-link.js';
export {
  chance,
  createRng,
  deriveSeed,
  exponential,
  logNormal,
  pick,
  type Rng,
  standardNormal,
  uniformInt,
} from './random.js';
export { onShutdownRequest } from './shutdown.js';
