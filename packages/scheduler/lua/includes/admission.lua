--- @include "includes/codes"
--- @include "includes/saturation"
-- The admission policy (decideAdmission in @fairgate/core): a rejection code, or nil to
-- admit. Reads a signal only when the policy needs it: always-admit reads nothing.
local function admissionCode(cfg, band, pods, now)
  local policy = cfg.admissionPolicy
  if policy == 'reject-all' then return Code.RejectedByPolicy end
  if policy == 'tier-shed' then
    if band < cfg.tierShedMinPriority and maxPodLoad(pods, now, cfg) > cfg.tierShedThreshold then
      return Code.ShedByTier
    end
  elseif policy == 'gaie-legacy' then
    if band < 0 and poolSaturation(pods, now, cfg) >= 1 then return Code.Saturated end
  end
  return nil
end
