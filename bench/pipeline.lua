-- wrk: 16 pipelined requests per write (bench/http.py --pipeline).
init = function(args)
  local r = {}
  for i = 1, 16 do
    r[i] = wrk.format(nil, "/")
  end
  req = table.concat(r)
end

request = function()
  return req
end
