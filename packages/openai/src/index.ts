export * from './errors.js';
export * from './requests.js';
export * from './responses.js';
export * from './sse.js';
export * from './tokens.js';
export * from './validate.js';
export * from './vllm-metrics.js';
