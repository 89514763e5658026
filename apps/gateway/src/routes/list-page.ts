/**
 * OpenAI's cursor page (`GET /v1/files`, `GET /v1/batches`): the objects, the first and
 * last ids (the client passes the last as `after` for the next page) and whether more follow.
 */
export function listPage<T extends { id: string }>(data: readonly T[], hasMore: boolean) {
  return {
    object: 'list' as const,
    data,
    first_id: data[0]?.id ?? null,
    last_id: data.at(-1)?.id ?? null,
    has_more: hasMore,
  };
}
