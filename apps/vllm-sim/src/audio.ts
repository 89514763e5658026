import {
  boundaryOf,
  formBoolean,
  MultipartError,
  type MultipartForm,
  readMultipart,
} from '@fairgate/openai';
import { deriveSeed } from '@fairgate/runtime';
import type { HttpBindings } from '@hono/node-server';
import { VllmError, validationError } from './adapters.js';
import { streamAudio } from './audio-stream.js';
import { badRequest } from './body.js';
import {
  CLIENT_GONE,
  clientOf,
  type EndpointDeps,
  modelOf,
  requestId,
  runSequences,
  type SimApp,
  type SimContext,
} from './context.js';
import type { SequenceSpec } from './engine.js';
import { PseudoText } from './text.js';

/**
 * POST /v1/audio/transcriptions and /v1/audio/translations (multipart/form-data, as OpenAI
 * and vLLM take them). The upload is read as a stream and only counted: its size makes the
 * audio tokens (--audio-bytes-per-token; 50 tokens per second of audio, Whisper's rate).
 * As vLLM splits audio into 30-second windows, each window of up to 1,500 tokens is one
 * engine sequence: a prefill of its audio tokens, then one text token per 16 audio tokens
 * (about 3 tokens per second of speech). The answer comes when every window is done.
 */
const AUDIO_TOKENS_PER_SECOND = 50;
const WINDOW_TOKENS = 30 * AUDIO_TOKENS_PER_SECOND;
const AUDIO_TOKENS_PER_TEXT_TOKEN = 16;
/** vLLM's VLLM_MAX_AUDIO_CLIP_FILESIZE_MB default. */
const MAX_FILE_BYTES = 25 * 1024 * 1024;
const FORMATS = ['json', 'text', 'verbose_json'];

type Task = 'transcribe' | 'translate';

export function addAudioRoutes(app: SimApp, deps: EndpointDeps): void {
  let requestIndex = 0;
  app.post('/v1/audio/transcriptions', (c) => answer(c, deps, 'transcribe', requestIndex++));
  app.post('/v1/audio/translations', (c) => answer(c, deps, 'translate', requestIndex++));
}

async function answer(c: SimContext, deps: EndpointDeps, task: Task, index: number) {
  const form = await formOf(c);
  if (!form) return CLIENT_GONE();
  const field = (name: string) => form.fields.get(name);
  const lora = modelOf(deps, field('model'));
  const file = form.files.get('file');
  if (!file) throw validationError('body.file', 'Field required');
  const responseFormat = field('response_format') ?? 'json';
  if (!FORMATS.includes(responseFormat)) {
    throw badRequest(
      'Currently only support response_format `text`, `json` or `verbose_json`',
      'response_format',
    );
  }
  if (file.bytes > MAX_FILE_BYTES) throw badRequest('Maximum file size exceeded.', 'file');
  if (file.bytes === 0) throw badRequest('The audio file is empty.', 'file');

  const audioTokens = Math.ceil(file.bytes / deps.config.audioBytesPerToken);
  const windows = audioWindows(audioTokens, deps.config.maxModelLen);
  const prefix = task === 'transcribe' ? 'trsc-' : 'trsl-';
  const specs: SequenceSpec[] = windows.map((tokens, window) => ({
    id: `${requestId(prefix)}-${window}`,
    promptTokens: tokens,
    promptBlockHashes: [],
    outputTokens: Math.max(1, Math.ceil(tokens / AUDIO_TOKENS_PER_TEXT_TOKEN)),
    finishReason: 'stop',
    ...(lora === null ? {} : { lora }),
  }));
  const words = new PseudoText(deriveSeed(deps.config.seed, 'audio', file.bytes, index));
  if (formBoolean(field('stream'))) {
    return streamAudio(
      deps,
      specs,
      clientOf(c),
      {
        id: requestId(prefix),
        object: task === 'transcribe' ? 'transcription.chunk' : 'translation.chunk',
        model: field('model') ?? deps.config.model,
        promptTokens: audioTokens,
        includeUsage: formBoolean(field('stream_include_usage')),
        continuousUsage: formBoolean(field('stream_continuous_usage_stats')),
      },
      words,
    );
  }
  const done = await runSequences(deps, specs, clientOf(c));
  if (!done) return CLIENT_GONE();

  const texts = done.map((seq) =>
    Array.from({ length: seq.generated }, () => words.next()).join(''),
  );
  const text = texts.join('');
  const seconds = audioTokens / AUDIO_TOKENS_PER_SECOND;
  if (responseFormat === 'verbose_json') {
    return c.json(verbose(texts, seconds, field('language') ?? 'en', field('temperature')));
  }
  // vLLM answers `text` in the same JSON object as `json`.
  return c.json(
    task === 'transcribe'
      ? { text, usage: { type: 'duration', seconds: Math.ceil(seconds) } }
      : { text },
  );
}

/**
 * The form, read from the node request when there is one (no Web-stream copy); null when the
 * client left during the upload.
 */
async function formOf(c: SimContext): Promise<MultipartForm | null> {
  const boundary = boundaryOf(c.req.header('content-type'));
  if (!boundary) {
    throw new VllmError(400, 'Bad Request', 'Expected a multipart/form-data body.', 'body');
  }
  const incoming = (c.env as Partial<HttpBindings> | undefined)?.incoming;
  const stream: AsyncIterable<Uint8Array> | null =
    incoming && !incoming.readableDidRead
      ? incoming
      : (c.req.raw.body as AsyncIterable<Uint8Array> | null);
  if (!stream) throw validationError('body.file', 'Field required');
  try {
    return await readMultipart(stream, boundary);
  } catch (error) {
    if (error instanceof MultipartError) {
      throw new VllmError(400, 'Bad Request', error.message, 'body');
    }
    if (incoming?.destroyed || c.req.raw.signal.aborted) return null; // the client left
    throw error;
  }
}

/** 30-second windows of the audio, each small enough to fit the context with its text. */
function audioWindows(audioTokens: number, maxModelLen: number): number[] {
  const fitting = Math.floor(
    ((maxModelLen - 1) * AUDIO_TOKENS_PER_TEXT_TOKEN) / (AUDIO_TOKENS_PER_TEXT_TOKEN + 1),
  );
  const size = Math.max(1, Math.min(WINDOW_TOKENS, fitting));
  const windows: number[] = [];
  for (let left = audioTokens; left > 0; left -= size) windows.push(Math.min(size, left));
  return windows;
}

/** vLLM's TranscriptionResponseVerbose: one segment per 30-second window. */
function verbose(texts: string[], seconds: number, language: string, temperature?: string) {
  const windowSeconds = WINDOW_TOKENS / AUDIO_TOKENS_PER_SECOND;
  return {
    duration: seconds.toFixed(2),
    language,
    text: texts.join(''),
    segments: texts.map((text, id) => ({
      id,
      avg_logprob: 0,
      compression_ratio: 1,
      end: Math.min(seconds, (id + 1) * windowSeconds),
      no_speech_prob: 0,
      seek: id * windowSeconds * 100,
      start: id * windowSeconds,
      temperature: Number(temperature ?? 0),
      text,
      tokens: [],
    })),
    words: null,
  };
}
