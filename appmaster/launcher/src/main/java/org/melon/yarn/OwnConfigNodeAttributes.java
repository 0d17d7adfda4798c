package org.melon.yarn;

import java.io.IOException;

import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.apache.hadoop.yarn.server.nodemanager.nodelabels.ConfigurationNodeAttributesProvider;

/**
 * Hadoop's configured node-attributes provider ({@code yarn.nodemanager.node-attributes.provider=config}), reading
 * its NodeManager's own configuration: the stock one reads a new {@code YarnConfiguration}, i.e. the classpath's
 * yarn-site.xml, which the NodeManagers of one JVM share. The same property, parsing and checks otherwise.
 *
 * <p>Node attributes date from Hadoop 3.2.0: the launcher's {@code hadoop-3.1} profile leaves this file out, and the
 * launcher names it only as a string ({@link MiniClusterLauncher#OWN_CONFIG_NODE_ATTRIBUTES}).
 */
public final class OwnConfigNodeAttributes extends ConfigurationNodeAttributesProvider {
  @Override
  public java.util.TimerTask createTimerTask() {
    return new java.util.TimerTask() {
      @Override
      public void run() {
        try {
          setDescriptors(parseAttributes(getConfig().get(YarnConfiguration.NM_PROVIDER_CONFIGURED_NODE_ATTRIBUTES)));
        } catch (IOException e) {
          System.err.println("MiniClusterLauncher: bad node attributes: " + e);
        }
      }
    };
  }
}
