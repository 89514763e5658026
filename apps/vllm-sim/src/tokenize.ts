import { renderChatPrompt } from '@fairgate/openai';
import { validationError } from './adapters.js';
import { badRequest, fields, readJsonObject } from './body.js';
import { type EndpointDeps, modelOf, type SimApp } from './context.js';

/**
 * vLLM's /tokenize and /detokenize, on the shared token estimate (4 characters per token,
 * ids from vocab.ts). Like vLLM's they run in the API server, not on the engine: no seat,
 * no engine time, no metrics.
 */
export function addTokenizeRoutes(app: SimApp, deps: EndpointDeps): void {
  app.post('/tokenize', async (c) => {
    const body = await readJsonObject(c);
    modelOf(deps, fields.optionalString(body, 'model'));
    const prompt =
      'messages' in body && !('prompt' in body)
        ? renderChatPrompt(fields.messages(body, 'messages'))
        : fields.string(body, 'prompt');
    const returnStrings = fields.optionalBoolean(body, 'return_token_strs') ?? false;
    const { ids, tokens } = deps.vocabulary.encode(prompt);
    return c.json({
      count: ids.length,
      max_model_len: deps.config.maxModelLen,
      tokens: ids,
      token_strs: returnStrings ? tokens : null,
    });
  });

  app.post('/detokenize', async (c) => {
    const body = await readJsonObject(c);
    modelOf(deps, fields.optionalString(body, 'model'));
    const ids = fields.integerList(body, 'tokens');
    const decoded = deps.vocabulary.decode(ids);
    if ('unknownId' in decoded) {
      if (decoded.unknownId < 0) throw validationError('body.tokens', 'Input should be >= 0');
      throw badRequest(`Token id ${decoded.unknownId} is out of vocabulary`, 'tokens');
    }
    return c.json({ prompt: decoded.text });
  });
}
