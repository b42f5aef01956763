import java.util.HashMap;
import java.util.Map;

/** Builds a HashMap of N String -> String, then prints its size and a hash over every entry. */
public class HashMapBench {
    public static void main(String[] args) {
        int n = Integer.parseInt(args[0]);
        HashMap<String, String> m = new HashMap<>();
        for (int i = 0; i < n; i++) {
            m.put("key" + i, "value-" + ((long) i * 7919 % 1000003));
        }
        long h = 1469598103934665603L;
        long len = 0;
        for (Map.Entry<String, String> e : m.entrySet()) {
            h = (h ^ e.getKey().hashCode()) * 1099511628211L;
            h = (h ^ e.getValue().hashCode()) * 1099511628211L;
            len += e.getValue().length();
        }
        System.out.println(m.size() + " " + len + " " + Long.toHexString(h));
    }
}
