import java.util.*;
public class Alloc { public static void main(String[] a){ int n=Integer.parseInt(a[0]); List<long[]> l=new ArrayList<>(); long s=0;
 for(int i=0;i<n;i++){ long[] x=new long[1024]; for(int j=0;j<x.length;j++) x[j]=i*31L+j; l.add(x);} 
 for(int r=0;r<3;r++) for(long[] x: l) for(long v: x) s+=v; System.out.println(s); } }
