import type { Notice } from './contract.js';

/**
 * Wire form of a notice in a replica's list: 'grant|<id>|<pod>', 'expired|<id>',
 * 'evict|<id>', 'shed|<id>'. Ids and pod names never contain '|'.
 */
export function formatNotice(notice: Notice): string {
  return notice.kind === 'grant'
    ? `grant|${notice.id}|${notice.pod}`
    : `${notice.kind}|${notice.id}`;
}

export function parseNotice(wire: string): Notice {
  const [kind, id, pod] = wire.split('|');
  if (id !== undefined) {
    if (kind === 'grant' && pod !== undefined) return { kind, id, pod };
    if (kind === 'expired' || kind === 'evict' || kind === 'shed') return { kind, id };
  }
  throw new Error(`malformed scheduler notice ${JSON.stringify(wire)}`);
}
