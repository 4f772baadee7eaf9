-- Argo CD health of an a2rl BenchSubmission (a2rl.dev/v1alpha1); Lua 5.1 (gopher-lua), reads `obj`.
-- From the conditions every a2rl object carries (docs/gitops.md): Stalled (a failed or rejected
-- evaluation) -> Degraded, Ready (scored) -> Healthy, anything else (being evaluated, or not
-- observed yet) -> Progressing.
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
  hs.message = "Waiting for the a2rl operator to evaluate the BenchSubmission"
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

-- The state too: a status an operator wrote before it set the GitOps conditions.
local stalled = condition(status, "Stalled")
if holds(stalled) then
  hs.status = "Degraded"
  hs.message = says(stalled, "The evaluation failed")
  return hs
end
if status.state == "Failed" or status.state == "Rejected" then
  hs.status = "Degraded"
  hs.message = status.state .. ": " .. (status.error or status.reason or "no score")
  return hs
end

local ready = condition(status, "Ready")
if holds(ready) then
  hs.status = "Healthy"
  hs.message = says(ready, "Scored")
  return hs
end
if status.state == "Succeeded" then
  hs.status = "Healthy"
  hs.message = "Scored " .. tostring(status.score)
  return hs
end

hs.status = "Progressing"
hs.message = says(condition(status, "Reconciling"), "The BenchSubmission is " .. string.lower(status.state or "pending"))
return hs
