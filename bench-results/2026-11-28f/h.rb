h = {}
n = (ARGV[0] || "2000000").to_i
n.times { |i| h["k#{i}"] = "v" * (i % 50) + i.to_s }
s = 0
h.each_value { |v| s += v.size }
a = h.keys.sort.first(3)
puts "#{h.size} #{s} #{a.join(',')}"
