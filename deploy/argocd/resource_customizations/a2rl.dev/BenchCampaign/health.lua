-- Argo CD health of an a2rl BenchCampaign (a2rl.dev/v1alpha1); Lua 5.1 (gopher-lua), reads `obj`.
-- From the conditions every a2rl object carries (docs/gitops.md): Stalled -> Degraded,
-- Ready -> Healthy, anything else (its runs in flight, or not observed yet) -> Progressing.
local hs = {}

local function condition(status, kind)
  if status == nil or status.conditions == nil then
    return nil
  end
  for _, c in ipairs(status.conditions) do
    if c.type == kind then
      return c
    end
  end
  return nil
end

local function holds(c)
  return c ~= nil and c.status == "True"
end

local function says(c, fallback)
  if c == nil then
    return fallback
  end
  local message = c.message or ""
  if c.reason ~= nil and c.reason ~= "" then
    if message ~= "" then
      return c.reason .. ": " .. message
    end
    return c.reason
  end
  if message ~= "" then
    return message
  end
  return fallback
end

local status = obj.status
if status == nil or status.conditions == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the a2rl operator to observe the BenchCampaign"
  return hs
end

local generation = nil
if obj.metadata ~= nil then
  generation = obj.metadata.generation
end
if generation ~= nil and status.observedGeneration ~= nil and status.observedGeneration ~= generation then
  hs.status = "Progressing"
  hs.message = "Waiting for the a2rl operator to observe generation " .. tostring(generation)
  return hs
end

local stalled = condition(status, "Stalled")
if holds(stalled) then
  hs.status = "Degraded"
  hs.message = says(stalled, "The BenchCampaign failed")
  return hs
end

local ready = condition(status, "Ready")
if holds(ready) then
  hs.status = "Healthy"
  hs.message = says(ready, "The BenchCampaign succeeded")
  return hs
end

hs.status = "Progressing"
hs.message = says(condition(status, "Reconciling"), "The BenchCampaign is " .. string.lower(status.phase or "pending"))
return hs
